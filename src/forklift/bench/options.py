"""Command-line options described on the config model itself: each field names its flag, help and limits once.

``forklift bench`` builds its options from these (``forklift.cli.bench``); :func:`validate` words every refusal
with the flag, so a library caller and a command-line user read the same message.

    input_len: int = flag(128, "--input-len", "Prompt tokens per request.", minimum=1)
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from forklift.errors import BenchError

_KEY = "forklift.flag"


@dataclass(frozen=True)
class Flag:
    """How one config field appears on the command line."""

    name: str
    help: str
    short: str | None = None
    minimum: float | None = None
    """Values below it are refused."""
    positive: bool = False
    """Only values above zero are accepted."""
    parse: Callable[[str], Any] | None = None
    """The flag takes text, turned into the field's value by this (ValueError names what is wrong)."""
    default_text: str | None = None
    """The default in words, where it depends on other flags."""
    example: str | None = None


def flag(default: Any, name: str, help: str, **kw: Any) -> Any:
    """A dataclass field with a default and its flag."""
    return dataclasses.field(default=default, metadata={_KEY: Flag(name, help, **kw)})


@dataclass(frozen=True)
class Option:
    """One flag of a (possibly nested) config: its dotted field path, type and default."""

    path: str
    flag: Flag
    type: Any
    """The value's type without None (``int``, ``float``, ``Path``); ``str`` for flags with a parser."""
    default: Any

    @property
    def dest(self) -> str:
        """A Python identifier for the path (``slo.ttft_ms`` -> ``slo__ttft_ms``)."""
        return self.path.replace(".", "__")

    @property
    def default_text(self) -> str | None:
        if self.flag.default_text is not None:
            return self.flag.default_text
        if isinstance(self.default, tuple):
            return ",".join(str(v) for v in self.default)
        return None if self.default is None else str(self.default)


def _bare(tp: Any) -> Any:
    """``int | None`` -> ``int``."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


def options(cls: type[Any], prefix: str = "") -> Iterator[Option]:
    """Every flagged field of a config dataclass, nested dataclasses flattened, in declaration order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            yield from options(tp, f"{prefix}{f.name}.")
            continue
        meta = f.metadata.get(_KEY)
        if meta is None:
            continue
        yield Option(f"{prefix}{f.name}", meta, str if meta.parse else _bare(tp), f.default)


def _parsed(opt: Option, value: Any) -> Any:
    if opt.flag.parse is None or not isinstance(value, str):
        return value
    try:
        return opt.flag.parse(value)
    except ValueError as exc:
        example = f"For example {opt.flag.name} {opt.flag.example}." if opt.flag.example else None
        raise BenchError(f"{opt.flag.name} {value!r}: {exc}", fix=example) from exc


def build(cls: type[Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor keywords for ``cls`` from flag values keyed by dotted path; None means "not given", so the
    field keeps its default. Nested configs are built the same way."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for opt in options(cls):
        value = values.get(opt.path)
        if value is None:
            continue
        head, _, rest = opt.path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = _parsed(opt, value)
        else:
            out[head] = _parsed(opt, value)
    hints = typing.get_type_hints(cls)
    for head, sub in nested.items():
        out[head] = hints[head](**sub)
    return out


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def validate(config: Any) -> None:
    """Refuse values outside a flag's limits, naming the flag: ``--requests 0 is below 1``."""
    for opt in options(type(config)):
        value = _get(config, opt.path)
        if value is None or not isinstance(value, int | float):
            continue
        name = opt.flag.name
        if not math.isfinite(value):
            raise BenchError(f"{name} {value} is not a number of requests, seconds or tokens",
                             fix=f"Pass {name} as a finite number.")
        if opt.flag.minimum is not None and value < opt.flag.minimum:
            low = opt.flag.minimum
            shown = int(low) if float(low).is_integer() else low
            raise BenchError(f"{name} {value} is below {shown}", fix=f"Pass {name} {shown} or more.")
        if opt.flag.positive and value <= 0:
            raise BenchError(f"{name} {value} is not positive", fix=f"Pass {name} greater than 0.")
