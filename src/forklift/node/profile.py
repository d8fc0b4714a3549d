"""Node profiles: what a prepared host looks like, as data (``profiles/*.yaml``), validated here.

A profile names sysctl values, a swap file, the guard's settings and the display-manager policy.
Values are range-checked so a typo (``vm.swappiness: 1000``) is refused before anything changes.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from forklift.errors import NodeError

GIB = 1 << 30

# sysctl keys forklift knows how to set, with the range it accepts (inclusive). Outside these, the
# kernel either refuses the value or the host becomes fragile (vm.vfs_cache_pressure=0 never reclaims
# dentries; a huge vm.min_free_kbytes OOMs at once).
SYSCTL_RANGES: dict[str, tuple[int, int]] = {
    "vm.swappiness": (0, 200),
    "vm.vfs_cache_pressure": (1, 10_000),
    "vm.min_free_kbytes": (1024, 16 * 1024 * 1024),
    "vm.dirty_ratio": (1, 100),
    "vm.dirty_background_ratio": (0, 100),
    "vm.overcommit_memory": (0, 2),
    "vm.watermark_scale_factor": (1, 3000),
}
MIN_FREE_MAX_FRACTION = 0.10
"""vm.min_free_kbytes above this fraction of MemTotal is refused at apply time."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SwapSpec(_Strict):
    path: str = Field(default="/swapfile-forklift", description="Absolute path of the swap file on the node.")
    size_gib: float = Field(gt=0, le=4096, description="Size of the swap file in GiB.")

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/") or ".." in v.split("/"):
            raise ValueError("must be an absolute path without '..'")
        return v

    @property
    def size_bytes(self) -> int:
        """Rounded to whole MiB (fallocate and mkswap want page multiples)."""
        return max(1, round(self.size_gib * 1024)) * (1 << 20)


class GuardSpec(_Strict):
    enabled: bool = True
    required: bool = Field(default=True, description="`node check` fails (not warns) when the guard is absent.")
    oom_score_adj: int = Field(default=-1000, ge=-1000, le=1000)
    drop_metric: Literal["MemFree", "MemAvailable"] = "MemAvailable"
    drop_below_gib: float = Field(default=10.0, ge=0, le=4096)
    drop_when: Literal["loading", "always", "never"] = "loading"
    drop_mode: Literal[1, 3] = 1
    cooldown_s: float = Field(default=10.0, ge=0, le=3600)
    interval_s: float = Field(default=1.0, gt=0, le=300)


class DisplayManagerSpec(_Strict):
    stop: bool = False
    unit: str = "display-manager.service"


class NodeProfile(_Strict):
    name: str
    description: str = ""
    unified_memory: bool = False
    sysctl: dict[str, int] = Field(default_factory=dict)
    swap: SwapSpec | None = None
    guard: GuardSpec = Field(default_factory=GuardSpec)
    display_manager: DisplayManagerSpec = Field(default_factory=DisplayManagerSpec)
    page_cache_warn_fraction: float = Field(default=0.5, gt=0, le=1)
    keep_ipc: bool = Field(
        default=True,
        description="systemd-logind RemoveIPC=no (a logind.conf.d drop-in): with RemoveIPC=yes, logind deletes a "
        "regular user's System V / POSIX IPC objects (vLLM's shared-memory semaphores) when that user's last "
        "session ends, e.g. the SSH session that started a rank.")
    sysctl_file: str = "/etc/sysctl.d/99-forklift-node.conf"

    @field_validator("sysctl")
    @classmethod
    def _known_and_in_range(cls, v: dict[str, int]) -> dict[str, int]:
        for key, value in v.items():
            if key not in SYSCTL_RANGES:
                near = difflib.get_close_matches(key, list(SYSCTL_RANGES), n=1)
                hint = f"; did you mean '{near[0]}'?" if near else f"; known: {', '.join(SYSCTL_RANGES)}"
                raise ValueError(f"{key}: unknown sysctl{hint}")
            lo, hi = SYSCTL_RANGES[key]
            if not lo <= value <= hi:
                raise ValueError(f"{key}: {value} is out of range {lo}..{hi}")
        return v

    @model_validator(mode="after")
    def _dirty_order(self) -> NodeProfile:
        bg = self.sysctl.get("vm.dirty_background_ratio")
        fg = self.sysctl.get("vm.dirty_ratio")
        if bg is not None and fg is not None and bg >= fg:
            raise ValueError(f"vm.dirty_background_ratio ({bg}) must be below vm.dirty_ratio ({fg})")
        return self

    def with_swap_gib(self, size_gib: float | None) -> NodeProfile:
        """This profile with the swap size overridden (``--swap-gib``); 0 means no swap file."""
        if size_gib is None:
            return self
        if size_gib == 0:
            return self.model_copy(update={"swap": None})
        try:
            spec = SwapSpec(path=self.swap.path if self.swap else "/swapfile-forklift", size_gib=size_gib)
        except ValidationError as exc:
            raise NodeError(f"--swap-gib {size_gib}: {_first_error(exc)}", fix="Pass a size in GiB, e.g. 64.") from exc
        return self.model_copy(update={"swap": spec})

    def with_stop_display_manager(self, stop: bool) -> NodeProfile:
        if not stop:
            return self
        return self.model_copy(update={"display_manager": self.display_manager.model_copy(update={"stop": True})})


def bundled_names() -> list[str]:
    folder = resources.files("forklift.node") / "profiles"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(name_or_path: str) -> NodeProfile:
    """A bundled profile by name (``gb10``, ``default``) or a YAML file path."""
    path = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise NodeError(f"node profile file {path} does not exist", fix="Check the path.")
        try:
            return parse_profile(path.read_text(), source=str(path))
        except (OSError, UnicodeDecodeError, RecursionError) as exc:
            raise NodeError(f"node profile file {path}: not readable ({type(exc).__name__}: {str(exc)[:300]})",
                            fix="A node profile is UTF-8 YAML of a few keys (`forklift node profiles` shows "
                                "them).") from None
    if name_or_path not in bundled_names():
        near = difflib.get_close_matches(name_or_path, bundled_names(), n=1)
        raise NodeError(
            f"no node profile named '{name_or_path}'" + (f"; did you mean '{near[0]}'?" if near else ""),
            fix=f"Use one of: {', '.join(bundled_names())}, or a path to a profile YAML.",
        )
    text = (resources.files("forklift.node") / "profiles" / f"{name_or_path}.yaml").read_text()
    return parse_profile(text, source=f"{name_or_path}.yaml")


def parse_profile(text: str, *, source: str) -> NodeProfile:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise NodeError(f"{source}: not valid YAML: {exc}", fix="Fix the YAML syntax.") from exc
    if not isinstance(data, dict):
        raise NodeError(f"{source}: a node profile is a mapping", fix="See forklift/node/profiles/gb10.yaml.")
    try:
        return NodeProfile.model_validate(data)
    except ValidationError as exc:
        problems = [_format_error(e) for e in exc.errors()]
        raise NodeError(
            f"{source}: " + "; ".join(problems),
            fix="Correct the value in the profile; ranges are listed in forklift.node.profile.SYSCTL_RANGES.",
        ) from exc


def _format_error(err: ErrorDetails) -> str:
    loc = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown field"
    return f"{loc}: {msg}" if loc else msg


def _first_error(exc: ValidationError) -> str:
    return _format_error(exc.errors()[0])
