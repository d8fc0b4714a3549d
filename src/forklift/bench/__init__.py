"""``forklift bench``: a streaming load generator, vLLM-compatible metrics, a /metrics cross-check, a report.

    target = bench.from_record("default")          # or bench.from_url("http://host:8000")
    result = bench.run(bench.BenchConfig(concurrency=(1, 2, 4), input_len=128, output_len=64), target)
    bench.write_report(result, Path("bench-results/x"))
"""

from forklift.bench.loadgen import BenchConfig, Progress, run, run_async
from forklift.bench.report import write as write_report
from forklift.bench.result import BenchResult, RequestRecord, RunResult, SingleStream
from forklift.bench.stats import Slo, percentile
from forklift.bench.target import Roofline, Target, from_record, from_url

__all__ = [
    "BenchConfig",
    "BenchResult",
    "Progress",
    "RequestRecord",
    "Roofline",
    "RunResult",
    "SingleStream",
    "Slo",
    "Target",
    "from_record",
    "from_url",
    "percentile",
    "run",
    "run_async",
    "write_report",
]
