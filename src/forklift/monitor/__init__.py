"""Watching deployments: ``forklift top``'s live figures from vLLM's ``/metrics`` and the nodes, and the
Prometheus / Grafana files of ``forklift monitor export``.

    with Monitor([record]) as mon:
        snap = once(mon, interval_s=1.0)          # rates and percentiles over one second
        snap.runs[0].window.generation_tok_s

It reads only what vLLM and the nodes expose; nothing is installed anywhere.
"""

from forklift.monitor.export import (
    BenchBaseline,
    Export,
    Target,
    Written,
    bench_baseline,
    build,
    export_run,
    find_node_exporters,
    write,
)
from forklift.monitor.metrics import Latency, Page, Speculative, Window, parse, quantile, window
from forklift.monitor.nodes import Gpu, NodeSample
from forklift.monitor.top import Monitor, RunSample, Snapshot, once

__all__ = ["BenchBaseline", "Export", "Gpu", "Latency", "Monitor", "NodeSample", "Page", "RunSample", "Snapshot",
           "Speculative", "Target", "Window", "Written", "bench_baseline", "build", "export_run", "find_node_exporters",
           "once", "parse", "quantile", "window", "write"]
