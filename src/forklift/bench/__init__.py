"""``forklift bench``: a streaming load generator, vLLM-compatible metrics, a /metrics cross-check, a report.

    target = Target.from_record(record.load("default"))     # forklift.endpoint.Target, or Target.from_url(URL)
    result = bench.run(bench.BenchConfig(concurrency=(1, 2, 4), input_len=128, output_len=64), target)
    bench.write_report(result, Path("bench-results/x"))

Names are imported on first use, so ``forklift.bench.config`` (what the command line is built from) stays
cheap to import.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forklift.bench.config import BenchConfig
    from forklift.bench.loadgen import Progress, run, run_async
    from forklift.bench.report import write as write_report
    from forklift.bench.result import BenchResult, RequestRecord, RunResult, SingleStream
    from forklift.bench.roofline import Roofline
    from forklift.bench.stats import Slo, percentile
    from forklift.endpoint import Target

_HOMES = {
    "BenchConfig": "config", "BenchResult": "result", "Progress": "loadgen", "RequestRecord": "result",
    "Roofline": "roofline", "RunResult": "result", "SingleStream": "result", "Slo": "stats", "percentile": "stats",
    "run": "loadgen", "run_async": "loadgen", "write_report": "report",
}
_NAMES_THERE = {"write_report": "write"}

__all__ = [
    "BenchConfig",
    "BenchResult",
    "Progress",
    "RequestRecord",
    "Roofline",
    "RunResult",
    "SingleStream",
    "Slo",
    "percentile",
    "run",
    "run_async",
    "write_report",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'forklift.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"forklift.bench.{home}"), _NAMES_THERE.get(name, name))
    globals()[name] = value
    return value


class _Bench(types.ModuleType):
    """The package is also the public call: ``forklift.bench(config, target)`` is ``run``."""

    def __call__(self, config: BenchConfig, target: Target) -> BenchResult:
        from forklift.bench.loadgen import run as run_bench

        return run_bench(config, target)


sys.modules[__name__].__class__ = _Bench
