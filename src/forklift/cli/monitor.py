"""``forklift monitor export``: Prometheus scrape configuration, alert rules and a Grafana dashboard for a run.

Exit codes: 0; 2 when there is no such run or the files cannot be written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from forklift.cli.common import JsonOpt, NameArg, print_json

monitor_app = typer.Typer(help="Monitoring files for a run: Prometheus, alert rules, Grafana.", no_args_is_help=True)


@monitor_app.command("export")
def export_cmd(
    name: NameArg = None,
    out: Annotated[Path, typer.Option("--out", help="Directory for prometheus.yml, alerts.yml and "
                                                    "grafana-dashboard.json (made if missing).")] = Path("monitor"),
    scrape_interval: Annotated[int, typer.Option("--scrape-interval", help="Seconds between scrapes.",
                                                 min=1)] = 15,
    probe_nodes: Annotated[bool, typer.Option("--probe-nodes/--no-probe-nodes",
                                              help="Ask each node whether a node exporter is installed.")] = True,
    force: Annotated[bool, typer.Option("--force", help="Replace files of the same names that an export did "
                                                        "not write.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write a scrape job for every rank's /metrics (and node exporters), alert rules (KV near full, growing
    queue, throughput below the run's bench, speculative acceptance exactly 0 or 1, a rank down) and a Grafana
    dashboard of the same figures."""
    from forklift import monitor
    from forklift.cli.status import load_run

    written = monitor.export_run(load_run(name), out, probe_nodes=probe_nodes, scrape_interval_s=scrape_interval,
                                 force=force)
    if json_out:
        print_json(written.to_json())
        return
    from forklift.cli.common import console

    e = written.export
    console.print(f"[bold]{e.run}[/]: job {e.job} scrapes {', '.join(t.address for t in e.vllm) or 'nothing'}"
                  + (f"; {e.node_job} scrapes {', '.join(t.address for t in e.node_exporters)}"
                     if e.node_exporters else ""), highlight=False)
    for kind, path in written.files.items():
        console.print(f"  {kind}: {path}", highlight=False)
    for note in e.notes:
        console.print(f"  note: {note}", highlight=False, soft_wrap=True)
    console.print(f"  check: promtool check config {written.files['prometheus']}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(monitor_app, name="monitor")
