"""The base of every recipe section (unknown keys are errors, assignment is validated) and the
environment map every ``env`` field uses.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

from forklift.names import ENV_NAME, has_control


class Strict(BaseModel):
    """Base for every recipe section: unknown keys rejected, assignment validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def _env_values_as_text(value: object) -> object:
    """Environment values are text; accept YAML numbers (CUDA_VISIBLE_DEVICES: 0) as their text."""
    if isinstance(value, dict):
        return {k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in value.items()}
    return value


def _env_names(value: dict[str, str]) -> dict[str, str]:
    """Names a shell and ``env`` read as names only; values that a process environment can hold."""
    for name, text in value.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name: use letters, digits and '_', "
                             "not starting with a digit (e.g. NCCL_DEBUG)")
        if "\0" in text:
            raise ValueError(f"the value of {name} holds a NUL byte, which no environment can carry")
    return value


EnvMap = Annotated[dict[str, str], BeforeValidator(_env_values_as_text), AfterValidator(_env_names)]


def _one_line(value: str) -> str:
    """Text that reaches an argv, a unit file, a YAML or a manifest as one value: no control characters (a newline
    would start a directive of its own in a systemd unit) and no leading '-' (an argv would read it as an option)."""
    if has_control(value):
        raise ValueError(f"{value!r} holds a control character (newline, tab, ...): one line of printable text")
    if value.startswith("-"):
        raise ValueError(f"{value!r} starts with '-', which a command line reads as an option")
    return value


OneLine = Annotated[str, AfterValidator(_one_line)]
"""A recipe value passed on as one argument or one line (names, paths, images)."""
