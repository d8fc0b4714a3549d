"""config.json as the model rules read it: the file, dotted or alternative keys, required integers."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from forklift.errors import ModelError

Cfg = Mapping[str, Any]
N = TypeVar("N", int, float)


def load_config(path: Path) -> dict[str, Any]:
    """Read a config.json (a file or a directory holding one)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise ModelError(f"{file} does not exist", fix="Point model.config or model.source at a config.json.") from None
    except json.JSONDecodeError as exc:
        raise ModelError(f"{file}: not valid JSON: {exc}", fix="Fix or replace the config.json.") from None
    if not isinstance(data, dict):
        raise ModelError(f"{file}: config.json must be a JSON object", fix="Replace the config.json.")
    return data


def lookup(cfg: Cfg, key: str | list[str]) -> Any:
    """``key`` may be dotted (``linear_attn_config.num_heads``) or a list of alternatives (first present wins)."""
    for k in [key] if isinstance(key, str) else key:
        value: Any = cfg
        for part in k.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            return value
    return None


def need_int(cfg: Cfg, key: str | list[str], ctx: tuple[str, str]) -> int:
    source, arch = ctx
    value = lookup(cfg, key)
    name = key if isinstance(key, str) else " or ".join(key)
    if value is None:
        raise ModelError(f"{source}: config.json for {arch} lacks '{name}', which the planner needs",
                         fix=f"Add \"{name}\" to config.json (copy it from the model's published config).")
    return as_number(value, name, ctx, int)


def as_number(value: Any, name: str, ctx: tuple[str, str], kind: Callable[[Any], N]) -> N:
    """A config value that must be an integer (``kind`` int) or a number (``kind`` float); ``name`` as the user finds
    it in config.json (e.g. ``compress_ratios[3]``). None and booleans are refused, not read as 0 / 1; an integer must
    be one (4096 or 4096.0, not "4096" or 48.5, which int() would read as 48)."""
    try:
        if isinstance(value, bool) or value is None:
            raise TypeError
        if kind is int and not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise TypeError
        return kind(value)
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        raise ModelError(f"{ctx[0]}: {ctx[1]}'s config.json '{name}' must be {what}, got {value!r}",
                         fix=f"Fix '{name}' in config.json (copy it from the model's published config).") from None
