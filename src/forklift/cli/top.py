"""``forklift top``: a live view of runs (vLLM's /metrics) and their nodes; ``--once --json`` for scripts.

Exit codes: 0, or 1 with ``--once`` when a run's /metrics could not be read; 2 when there is no such run.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from forklift.cli import common
from forklift.cli.common import JsonOpt, print_json

if TYPE_CHECKING:
    from rich.console import Group, RenderableType

    from forklift.monitor import Latency, NodeSample, RunSample, Snapshot
    from forklift.record import RunRecord

NamesArg = Annotated[list[str] | None, typer.Argument(help="Runs to watch (default: every run not stopped).")]


def _records(names: list[str] | None) -> list[RunRecord]:
    from forklift import record as records
    from forklift.errors import MonitorError

    if names:
        return [records.load(records.resolve_name(n)) for n in names]
    found = [r for r in records.list_records() if r.status != "stopped"]
    if not found:
        raise MonitorError("no run to watch", fix="Start one with `forklift up`, or name a run: `forklift top NAME`.")
    return found


def _f(x: float | None, fmt: str = "{:.1f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def _gib(b: float | None) -> str:
    return _f(None if b is None else b / 2**30, "{:.1f} GiB")


def _run_table(run: RunSample) -> RenderableType:
    from rich.table import Table

    title = f"[bold]{run.name}[/] {run.status} {run.endpoint} ({run.model})"
    if run.error is not None:
        return Table(title=title + f"\n[red]no metrics[/]: {run.error}", title_justify="left")
    w = run.window
    t = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    t.add_column(style="dim")
    t.add_column(justify="right")
    t.add_column(style="dim")
    t.add_column(justify="right")
    if w is None:
        t.add_row("waiting for a second sample", "", "", "")
        return t
    spec = w.speculative if w.speculative is not None and w.speculative.drafts else w.speculative_total

    def lat(x: Latency | None, total: Latency | None) -> str:
        if x is not None and x.requests:
            return f"{_f(x.p50_ms, '{:.0f}')} / {_f(x.p95_ms, '{:.0f}')} ms ({x.requests})"
        if total is not None and total.requests:
            return f"idle; since start {_f(total.p50_ms, '{:.0f}')} / {_f(total.p95_ms, '{:.0f}')} ms"
        return "- (no requests)"

    t.add_row("requests running", _f(w.running, "{:.0f}"), "waiting", _f(w.waiting, "{:.0f}"))
    t.add_row("generation tok/s", _f(w.generation_tok_s), "prompt tok/s", _f(w.prompt_tok_s))
    t.add_row(f"TTFT p50 / p95 ({w.seconds:.0f} s)", lat(w.ttft, w.ttft_total),
              "TPOT p50 / p95", lat(w.tpot, w.tpot_total))
    t.add_row("KV cache use", _f(None if w.kv_cache_usage is None else 100 * w.kv_cache_usage, "{:.1f} %"),
              "prefix-cache hits",
              _f(None if w.prefix_cache_hit_rate_total is None else 100 * w.prefix_cache_hit_rate_total, "{:.1f} %"))
    t.add_row("preemptions", _f(w.preemptions, "{:.0f}"), "in window", _f(w.preemptions_window, "{:.0f}"))
    if spec is not None:
        per_pos = ", ".join(_f(p, "{:.2f}") for p in spec.per_position)
        t.add_row("spec acceptance", _f(spec.acceptance_rate, "{:.2f}"), "per position", per_pos or "-")
    return t


def _node_table(nodes: tuple[NodeSample, ...]) -> RenderableType:
    from rich.table import Table

    t = Table("node", "mem available", "of", "swap used", "load", "GPU util / mem / temp / power / SM clock",
              title="nodes", title_justify="left")
    for n in nodes:
        if n.error is not None:
            t.add_row(n.host, f"[red]{n.error}[/]", "", "", "", "")
            continue
        gpus = "\n".join(f"{g.index}: {_f(g.utilization_pct, '{:.0f}%')} / {_f(g.memory_used_mib, '{:.0f}')} MiB / "
                         f"{_f(g.temperature_c, '{:.0f}')} C / {_f(g.power_w, '{:.0f}')} W / "
                         f"{_f(g.sm_clock_mhz, '{:.0f}')} MHz" for g in n.gpus) or "no nvidia-smi"
        t.add_row(n.host, _gib(n.mem_available_bytes), _gib(n.mem_total_bytes), _gib(n.swap_used_bytes),
                  _f(n.load_1m, "{:.2f}"), gpus)
        for line in n.guard_events:
            t.add_row("", f"[dim]guard: {line}[/]", "", "", "", "")
    return t


def _render(snap: Snapshot) -> Group:
    from rich.console import Group

    stamp = time.strftime("%H:%M:%S", time.localtime(snap.at))
    return Group(f"[dim]forklift top  {stamp}  (Ctrl-C quits)[/]", *(_run_table(r) for r in snap.runs),
                 _node_table(snap.nodes))


def top_cmd(
    names: NamesArg = None,
    once: Annotated[bool, typer.Option("--once", help="Sample twice, --interval apart, print, and exit.")] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between samples.", min=0.1)] = 2.0,
    window: Annotated[float, typer.Option("--window", help="Seconds of history for rates and percentiles.",
                                          min=1.0)] = 60.0,
    json_out: JsonOpt = False,
) -> None:
    """Watch runs live: requests, tok/s, TTFT / TPOT p50 and p95, KV cache, prefix-cache hits, preemptions,
    speculative acceptance; per node memory, load and GPUs. --json prints one snapshot (each tick without
    --once) as JSON."""
    from forklift import monitor

    with monitor.Monitor(_records(names), window_s=window) as mon:
        if once:
            snap = monitor.once(mon, interval)
            if json_out:
                print_json(snap.to_json())
            else:
                common.console.print(_render(snap))
            if not all(r.up for r in snap.runs):
                raise typer.Exit(1)
            return
        try:
            if json_out:
                while True:
                    print_json(mon.tick().to_json())
                    time.sleep(interval)
            from rich.live import Live

            with Live(_render(mon.tick()), console=common.console, auto_refresh=False, screen=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(_render(mon.tick()), refresh=True)
        except KeyboardInterrupt:
            return


def register(app: typer.Typer) -> None:
    app.command("top")(top_cmd)
