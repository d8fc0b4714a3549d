"""Patch definitions as data: the YAML schema, its validation, and the catalog.

A patch file (``catalog/<id>.yaml``, or ``$FORKLIFT_HOME/patches/<id>.yaml`` for your own):

.. code-block:: yaml

    id: kv-scale-loader-args                 # must equal the file name
    description: what it fixes and why
    origin: where it came from (optional)
    vllm: ">=0.26,<0.34"                     # packaging specifier of the versions it is for
    marker: "[forklift-patch kv-scale-loader-args]"   # optional; logged and kept in the run record
    files:
      - module: vllm.model_executor.layers.quantization.kv_cache   # or a list: where it lived per version
        edits:                               # anchors; each must match exactly once
          - function: KVCacheScaleParameter.weight_loader           # optional AST scope
            signature: "(param: torch.nn.Parameter, loaded_weight: torch.Tensor) -> None"
            old: "...exact original snippet..."
            new: "...replacement..."
        verify:                              # evidence the patched behaviour is present
          - function: KVCacheScaleParameter.weight_loader
            signature: "(param: torch.nn.Parameter, loaded_weight: torch.Tensor, *args) -> None"
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from forklift import paths
from forklift.errors import PatchError, UnknownPatchError
from forklift.patches import core
from forklift.yamlio import load_data


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EditModel(_Strict):
    """One anchored replacement."""

    new: str = Field(description="Replacement text.")
    old: str | None = Field(default=None, description="Exact original snippet; omitted = the whole function.")
    function: str | None = Field(default=None, description="Dotted def path (Class.method) scoping the anchor.")
    signature: str | None = Field(default=None, description="Expected signature of `function`, '(a, b) -> T'.")

    @model_validator(mode="after")
    def _anchor_present(self) -> EditModel:
        if self.old is None and self.function is None:
            raise ValueError("an edit needs an anchor: 'old' (exact snippet) and/or 'function'")
        if self.old is not None and not self.old:
            raise ValueError("'old' must not be empty")
        if self.signature is not None:
            if self.function is None:
                raise ValueError("'signature' needs 'function'")
            core.normalize_signature(self.signature)
        return self


class CheckModel(_Strict):
    """One verification: the function exists (with the signature) and/or contains a snippet."""

    contains: str | None = None
    function: str | None = None
    signature: str | None = None

    @model_validator(mode="after")
    def _something_to_check(self) -> CheckModel:
        if self.contains is None and self.function is None:
            raise ValueError("a check needs 'contains' and/or 'function'")
        if self.signature is not None:
            if self.function is None:
                raise ValueError("'signature' needs 'function'")
            core.normalize_signature(self.signature)
        return self


class FileModel(_Strict):
    """The edits to one module of vLLM."""

    module: str | list[str] = Field(description="Dotted module inside vllm; a list = where it lived per version.")
    edits: list[EditModel] = Field(min_length=1)
    verify: list[CheckModel] = Field(min_length=1)

    @field_validator("module")
    @classmethod
    def _modules_valid(cls, v: str | list[str]) -> str | list[str]:
        for m in [v] if isinstance(v, str) else v:
            core.module_candidates(m)
        if isinstance(v, list) and not v:
            raise ValueError("at least one module")
        return v

    @property
    def modules(self) -> tuple[str, ...]:
        return (self.module,) if isinstance(self.module, str) else tuple(self.module)


class Patch(_Strict):
    """A vLLM source patch that knows the versions it is for."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = Field(min_length=1)
    origin: str | None = None
    vllm: str = Field(description="Specifier of the vLLM versions this patch is for, e.g. '>=0.26,<0.34'.")
    marker: str | None = Field(default=None, description="Log marker; default '[forklift-patch ID]'.")
    files: list[FileModel] = Field(min_length=1)
    source: str | None = Field(default=None, exclude=True, description="File it was loaded from.")

    @field_validator("vllm")
    @classmethod
    def _specifier(cls, v: str) -> str:
        try:
            SpecifierSet(v)
        except InvalidSpecifier as exc:
            raise ValueError(f"{v!r} is not a version specifier like '>=0.26,<0.34'") from exc
        return v

    @property
    def log_marker(self) -> str:
        return self.marker or f"[forklift-patch {self.id}]"

    def to_core(self) -> core.PatchDef:
        return core.PatchDef(
            id=self.id,
            description=self.description,
            vllm=self.vllm,
            marker=self.log_marker,
            files=tuple(
                core.FileSpec(
                    modules=f.modules,
                    edits=tuple(core.Edit(new=e.new, old=e.old, function=e.function, signature=e.signature)
                                for e in f.edits),
                    verify=tuple(core.Check(contains=c.contains, function=c.function, signature=c.signature)
                                 for c in f.verify),
                )
                for f in self.files
            ),
        )


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_FIELDS = sorted({*Patch.model_fields, *FileModel.model_fields, *EditModel.model_fields, *CheckModel.model_fields})


def parse_patch(data: Any, *, source: str) -> Patch:
    """Validate one patch document; errors name the file, each field path and the fix."""
    if not isinstance(data, dict):
        raise PatchError(f"{source}: a patch file must be a mapping, got {type(data).__name__}",
                         fix="See `forklift patch show kv-scale-loader-args` for the format.")
    try:
        patch = Patch.model_validate({**data, "source": source})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = _loc(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "missing":
                msg = "required field is missing"
            elif err["type"] == "extra_forbidden":
                close = difflib.get_close_matches(str(err["loc"][-1]), _FIELDS, n=1, cutoff=0.5)
                msg = "unknown field" + (f"; did you mean {close[0]!r}?" if close else "")
            problems.append(f"{where}: {msg}")
        raise PatchError(f"{source}: " + "; ".join(problems),
                         fix="Fix the patch file; `forklift patch show ID` prints a valid one.") from exc
    stem = Path(source).stem
    if source.endswith((".yaml", ".yml")) and stem != patch.id:
        raise PatchError(f"{source}: id {patch.id!r} does not match the file name {stem!r}",
                         fix=f"Rename the file to {patch.id}.yaml or change its id.")
    return patch


def load_patch_file(path: Path) -> Patch:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PatchError(f"{path}: cannot read: {exc.strerror}") from exc
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise PatchError(f"{path}: not valid YAML ({type(exc).__name__}: {str(exc)[:300]})",
                         fix="Fix the file (UTF-8 YAML, as the bundled catalog's), or move it out of the patches "
                             "folder.") from None
    return parse_patch(data, source=str(path))


def user_dir() -> Path:
    """Your own patches: ``$FORKLIFT_HOME/patches/*.yaml`` (same format as the bundled catalog)."""
    return paths.home() / "patches"


def catalog(extra_dirs: list[Path] | None = None) -> dict[str, Patch]:
    """Every known patch by id: the bundled catalog, then the user's directory (which may override)."""
    patches: dict[str, Patch] = {}
    bundled = resources.files("forklift.patches") / "catalog"
    for entry in sorted(bundled.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            data = load_data(entry.read_text(encoding="utf-8"))
            p = parse_patch(data, source=f"catalog/{entry.name}")
            patches[p.id] = p
    for d in [user_dir(), *(extra_dirs or [])]:
        if d.is_dir():
            for path in sorted(d.glob("*.yaml")):
                p = load_patch_file(path)
                patches[p.id] = p
    return patches


def get(ids: list[str], known: dict[str, Patch] | None = None) -> list[Patch]:
    """The patches with these ids, in order; an unknown id is an error that suggests the closest."""
    known = catalog() if known is None else known
    out = []
    for pid in ids:
        if pid in known:
            out.append(known[pid])
            continue
        p = Path(pid)
        if p.suffix in (".yaml", ".yml") and p.is_file():
            out.append(load_patch_file(p))
            continue
        close = difflib.get_close_matches(pid, list(known), n=1)
        raise UnknownPatchError(f"unknown patch {pid!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
                         fix="`forklift patch list` shows the known patches.")
    return out


def source_text(patch: Patch) -> str:
    """The YAML a patch was loaded from (re-dumped when it came from elsewhere)."""
    if patch.source and patch.source.startswith("catalog/"):
        return (resources.files("forklift.patches") / patch.source).read_text(encoding="utf-8")
    if patch.source and Path(patch.source).is_file():
        return Path(patch.source).read_text(encoding="utf-8")
    return yaml.safe_dump(patch.model_dump(mode="json", exclude_none=True), sort_keys=False, width=120)
