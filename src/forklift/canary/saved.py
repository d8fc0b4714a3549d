"""Saved results, read back: a bench ``results.json`` (what ``forklift bench`` writes) or a check report (what
``forklift check --json`` prints and ``check`` saves beside its run). Only the JSON is read, so results from any
forklift version with the same fields compare.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from forklift.errors import CompareError


@dataclass(frozen=True)
class Request:
    """One request's samples, in seconds (None where the run did not measure it)."""

    output_tokens: int
    ttft: float | None
    tpot: float | None
    e2e: float | None
    itl: tuple[float, ...] | None
    """None when the file predates per-request gaps (then ITL is not compared)."""
    start: float | None = None
    """Send time, seconds from the run's start."""


@dataclass(frozen=True)
class Level:
    """One load level of a bench run: its key and the successful requests' samples."""

    concurrency: int | None
    rate: float | None
    requests: tuple[Request, ...]
    failed: int
    output_tok_s: float | None
    goodput_req_s: float | None
    slo: dict[str, float | None] | None
    duration_s: float | None = None

    @property
    def key(self) -> str:
        c = "inf" if self.concurrency is None else str(self.concurrency)
        return f"c={c}" + (f",rate={self.rate:g}" if self.rate else "")


@dataclass(frozen=True)
class Bench:
    path: str
    target: dict[str, Any]
    settings: dict[str, Any]
    started_at: float | None
    levels: tuple[Level, ...]
    kind: Literal["bench"] = "bench"

    @property
    def start(self) -> str | None:
        """The server start that served this run (the run record's id; ``forklift bench`` against a run saves it),
        None when the result does not say."""
        start = self.target.get("start")
        return None if start is None else f"{self.target.get('run')}:{start}"

    def level(self, key: str) -> Level | None:
        return next((lv for lv in self.levels if lv.key == key), None)


@dataclass(frozen=True)
class Check:
    path: str
    target: dict[str, Any]
    tier: str
    statuses: dict[str, str]
    """check id -> ok / warn / fail / skip (reports written before the shared result shape said 'pass')."""
    summaries: dict[str, str] = field(default_factory=dict)
    saved_at: float | None = None
    kind: Literal["check"] = "check"


Saved = Bench | Check


def _seconds(ms: Any) -> float | None:
    return None if ms is None else _finite(ms) / 1000.0


def _finite(value: Any) -> float:
    """A sample as a number: a bool, text, NaN, an infinity or a negative time is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{value!r} is not a non-negative number")
    return float(value)


def _request(raw: dict[str, Any]) -> Request | None:
    if raw.get("error") or raw.get("ttft_ms") is None:
        return None
    itl = raw.get("itl_ms")
    return Request(output_tokens=int(raw.get("output_tokens") or 0), ttft=_seconds(raw.get("ttft_ms")),
                   tpot=_seconds(raw.get("tpot_ms")), e2e=_seconds(raw.get("e2e_ms")),
                   itl=None if itl is None else tuple(_finite(g) / 1000.0 for g in itl), start=raw.get("start_s"))


def _level(raw: dict[str, Any], where: str) -> Level:
    if "per_request" not in raw:
        raise CompareError(f"{where}: a run without per-request samples",
                           fix="Compare results.json files as `forklift bench` writes them (not --json summaries "
                               "without per_request).")
    reqs = tuple(r for r in (_request(x) for x in raw["per_request"]) if r is not None)
    concurrency = raw.get("concurrency")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)):
        raise ValueError(f"concurrency {concurrency!r} is not a whole number")
    return Level(concurrency=concurrency, rate=_optional(raw.get("rate")), requests=reqs,
                 failed=int(raw.get("failed") or 0), output_tok_s=_optional(raw.get("output_tok_s")),
                 goodput_req_s=_optional(raw.get("goodput_req_s")), slo=raw.get("slo"),
                 duration_s=_optional(raw.get("duration_s")))


def _optional(value: Any) -> float | None:
    return None if value is None else _finite(value)


def _normal_status(status: str) -> str:
    return {"pass": "ok", "skipped": "skip"}.get(status, status)


def from_json(data: Any, where: str) -> Saved:
    """A saved result from its parsed JSON; ``where`` names it in errors. A value of the wrong shape (a run that is
    not an object, a time that is not a number) is a CompareError naming the file, never a traceback."""
    try:
        return _from_json(data, where)
    except CompareError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise CompareError(f"{where}: not a result forklift wrote ({type(exc).__name__}: {exc})",
                           fix="Pass the results.json `forklift bench` wrote or a `forklift check --json` report, "
                               "unchanged.") from None


def _from_json(data: Any, where: str) -> Saved:
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        levels = tuple(_level(r, f"{where} run {i}") for i, r in enumerate(data["runs"]))
        return Bench(where, dict(data.get("target") or {}), dict(data.get("settings") or {}),
                     data.get("started_at"), levels)
    if isinstance(data, dict) and isinstance(data.get("checks"), list):
        checks = [c for c in data["checks"] if isinstance(c, dict) and "id" in c]
        return Check(where, dict(data.get("target") or {}), str(data.get("tier") or "quick"),
                     {str(c["id"]): _normal_status(str(c.get("status"))) for c in checks},
                     {str(c["id"]): str(c.get("summary") or "") for c in checks}, data.get("saved_at"))
    raise CompareError(f"{where}: neither bench results (no 'runs') nor a check report (no 'checks')",
                       fix="Pass a bench results.json or a saved check report (`forklift check --json`).")


def load(path: Path | str) -> Saved:
    """Read one saved result; a directory means its ``results.json`` (a bench output folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise CompareError(f"{p}: no such file", fix="Pass a bench results.json, a bench output folder or a "
                                                     "saved check report.") from exc
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError, 4300-digit ints
        raise CompareError(f"{p}: not readable JSON ({type(exc).__name__}: {str(exc)[:200]})",
                           fix="Pass the file forklift wrote, unchanged.") from None
    return from_json(data, str(p))
