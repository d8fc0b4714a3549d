"""``forklift monitor export``: a run's Prometheus scrape configuration, alert rules and Grafana dashboard.

Targets come from the run record: every rank that serves HTTP (vLLM's headless ranks serve none; a dead one
takes the head's engine down, which the head's ``up`` shows), and each node's node exporter where one is
installed. The throughput alert compares the server's generation rate with the run's own newest saved bench
(``forklift bench NAME``) at the concurrency that bench measured best; without a saved bench that rule is left
out and the export says so. Everything is plain data (dicts) until :func:`write` puts it in files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from forklift.cluster.stop import record_runners
from forklift.errors import MonitorError
from forklift.launch.render import node_addr
from forklift.monitor import metrics as m
from forklift.record import RunRecord, latest_bench
from forklift.runner import Runner, fan_out
from forklift.speculative.metrics import SUSPECT_MIN_DRAFTS

NODE_EXPORTER_PORT = 9100
KV_FULL = 0.9
"""KV cache usage above which the KV alert fires (vLLM preempts requests when it runs out)."""
THROUGHPUT_DROP = 0.3
"""The throughput alert fires below (1 - this) x the bench's output tok/s at the same load."""
MIN_DRAFTS = SUSPECT_MIN_DRAFTS
"""Drafts in the alert window before an acceptance of exactly 0 or 1 is called suspect (bench's threshold)."""
FILES = {"prometheus": "prometheus.yml", "rules": "alerts.yml", "dashboard": "grafana-dashboard.json"}


@dataclass(frozen=True)
class Target:
    """One address Prometheus scrapes."""

    address: str
    """host:port"""
    host: str
    """The node's name in the recipe."""
    rank: int | None = None
    """The vLLM rank (None for a node exporter)."""


@dataclass(frozen=True)
class BenchBaseline:
    """What the run's own bench measured at its best level."""

    output_tok_s: float
    concurrency: int | None
    path: str


@dataclass(frozen=True)
class Export:
    run: str
    job: str
    node_job: str
    vllm: tuple[Target, ...]
    node_exporters: tuple[Target, ...]
    bench: BenchBaseline | None
    speculative: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "job": self.job, "node_job": self.node_job,
                "vllm_targets": [t.__dict__ for t in self.vllm],
                "node_exporter_targets": [t.__dict__ for t in self.node_exporters],
                "bench": None if self.bench is None else self.bench.__dict__, "speculative": self.speculative,
                "notes": list(self.notes)}


def vllm_targets(record: RunRecord) -> list[Target]:
    """Every rank that serves HTTP: the head at the record's endpoint, any other at its node's address."""
    nodes = record.recipe.nodes
    head = httpx.URL(record.endpoint)
    out = []
    for rank in record.launch.ranks:
        if rank.headless or rank.role != "engine":
            continue
        if rank.rank == 0:
            address = f"{head.host}:{head.port or 80}"
        else:
            address = f"{node_addr(nodes[rank.node_index])}:{record.launch.port}"
        out.append(Target(address=address, host=rank.host, rank=rank.rank))
    return out


def find_node_exporters(record: RunRecord, runners: Mapping[int, Runner],
                        port: int = NODE_EXPORTER_PORT) -> list[Target]:
    """Nodes where a node exporter is installed (``prometheus-node-exporter`` or ``node_exporter`` on PATH,
    or something listening on ``port``). A node that cannot be asked counts as without one."""
    probe = ('command -v prometheus-node-exporter >/dev/null 2>&1 || command -v node_exporter >/dev/null 2>&1 '
             '|| { command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$1" | grep -q .; }')
    nodes = dict(enumerate(record.recipe.nodes))
    found = fan_out(((i, i) for i in nodes if i in runners),
                    lambda i: runners[i].run(["sh", "-c", probe, "forklift-probe", str(port)], timeout=30).ok)
    return [Target(address=f"{node_addr(nodes[i])}:{port}", host=nodes[i].host)
            for i in nodes if found.results.get(i)]


def bench_baseline(record: RunRecord) -> BenchBaseline | None:
    """The newest saved bench of the run: its highest output tok/s over complete levels, with that level's
    concurrency. None without one. Raises ``MonitorError`` when the file cannot be read."""
    path = latest_bench(record.name)
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
        levels = [r for r in data.get("runs", []) if r.get("output_tok_s") and not r.get("partial")]
    except (OSError, ValueError, AttributeError) as exc:
        raise MonitorError(f"cannot read the saved bench {path}: {exc}",
                           fix=f"Run `forklift bench {record.name}` again, or remove {path.parent}.") from exc
    if not levels:
        return None
    best = max(levels, key=lambda r: float(r["output_tok_s"]))
    conc = best.get("concurrency")
    return BenchBaseline(float(best["output_tok_s"]), int(conc) if isinstance(conc, int) else None, str(path))


def build(record: RunRecord, *, node_exporters: Sequence[Target] = (), bench: BenchBaseline | None = None) -> Export:
    """The export's content for ``record``."""
    notes = []
    headless = [r.rank for r in record.launch.ranks if r.headless]
    if headless:
        notes.append(f"ranks {headless} are headless (vLLM serves /metrics on the head only); a dead worker "
                     "takes the head's engine down, which its up series shows")
    if bench is None:
        notes.append(f"no saved bench for '{record.name}': the throughput-drop rule is left out "
                     f"(run `forklift bench {record.name}`, then export again)")
    if not node_exporters:
        notes.append("no node exporter found on the nodes: node panels stay empty "
                     "(install prometheus-node-exporter, then export again)")
    return Export(run=record.name, job=f"forklift-{record.name}", node_job=f"forklift-{record.name}-nodes",
                  vllm=tuple(vllm_targets(record)), node_exporters=tuple(node_exporters), bench=bench,
                  speculative=record.recipe.serve.speculative is not None, notes=tuple(notes))


def prometheus_config(export: Export, *, scrape_interval_s: int = 15) -> dict[str, Any]:
    """prometheus.yml: one job for the vLLM ranks (labelled with run, host and rank), one for node exporters."""
    def statics(targets: Sequence[Target]) -> list[dict[str, Any]]:
        return [{"targets": [t.address],
                 "labels": {"run": export.run, "host": t.host} | ({"rank": str(t.rank)} if t.rank is not None
                                                                   else {})}
                for t in targets]

    jobs: list[dict[str, Any]] = [{"job_name": export.job, "metrics_path": "/metrics",
                                   "static_configs": statics(export.vllm)}]
    if export.node_exporters:
        jobs.append({"job_name": export.node_job, "static_configs": statics(export.node_exporters)})
    return {"global": {"scrape_interval": f"{scrape_interval_s}s", "evaluation_interval": f"{scrape_interval_s}s"},
            "rule_files": [FILES["rules"]], "scrape_configs": jobs}


def _sel(export: Export) -> str:
    return f'{{job="{export.job}"}}'


def alert_rules(export: Export, *, kv_full: float = KV_FULL, drop: float = THROUGHPUT_DROP,
                min_drafts: int = MIN_DRAFTS) -> dict[str, Any]:
    """The alert rules file: KV near full, a growing queue, throughput below the run's bench, acceptance of
    exactly 0 or 1, a rank (or node exporter) down."""
    s, run = _sel(export), export.run
    labels = {"run": run}

    def rule(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
        return {"alert": name, "expr": expr, "for": for_, "labels": labels | {"severity": severity},
                "annotations": {"summary": summary, "description": description}}

    rules = [
        rule("ForkliftRankDown", f"up{s} == 0", "1m", "critical",
             f"{run}: rank {{{{ $labels.rank }}}} on {{{{ $labels.host }}}} does not answer /metrics",
             f"forklift status {run}; forklift doctor {run}"),
        rule("ForkliftKVCacheNearFull", f"max by (instance) (vllm:kv_cache_usage_perc{s}) > {kv_full}", "5m",
             "warning", f"{run}: KV cache above {kv_full:.0%} for 5 minutes",
             "vLLM preempts requests when the KV cache runs out; lower serve.max_num_seqs or add KV memory "
             "(forklift plan shows the KV tokens)"),
        rule("ForkliftQueueGrowing",
             f"sum(vllm:num_requests_waiting{s}) > 0 and "
             f"deriv(sum(vllm:num_requests_waiting{s})[10m:30s]) > 0", "10m", "warning",
             f"{run}: requests waiting, and more every minute for 10 minutes",
             "Arrivals exceed what the deployment serves; see the running/waiting panel and KV cache use"),
    ]
    if export.bench is not None:
        b = export.bench
        floor = round(b.output_tok_s * (1 - drop), 2)
        busy = f"sum(vllm:num_requests_running{s}) >= {b.concurrency}" if b.concurrency else \
            f"sum(vllm:num_requests_running{s}) > 0"
        rules.append(rule(
            "ForkliftThroughputDrop", f"sum(rate(vllm:generation_tokens_total{s}[5m])) < {floor} and {busy}",
            "10m", "warning",
            f"{run}: generation below {floor} tok/s while as busy as its bench",
            f"The run's bench ({b.path}) measured {b.output_tok_s:.1f} output tok/s at concurrency "
            f"{b.concurrency}; the server now does less than {1 - drop:.0%} of that at the same load"))
    drafts = f"sum(increase(vllm:spec_decode_num_drafts_total{s}[15m]))"
    accepted = f"sum(increase(vllm:spec_decode_num_accepted_tokens_total{s}[15m]))"
    draft_tokens = f"sum(increase(vllm:spec_decode_num_draft_tokens_total{s}[15m]))"
    rules.append(rule(
        "ForkliftSpecAcceptanceStuck",
        f"({drafts} > {min_drafts}) and (({accepted} == 0) or ({accepted} / {draft_tokens} >= 0.9999))", "15m",
        "warning", f"{run}: speculative acceptance exactly 0 or 1 over more than {min_drafts} drafts",
        "Every draft rejected is the known CUDA-graph bug (vllm-project/vllm#53030: PIECEWISE graphs with "
        "speculative decoding reject every draft silently; try serve.enforce_eager or a newer vLLM); every draft "
        "accepted means the drafter is the target model or the counter is broken"))
    if export.node_exporters:
        rules.append(rule(
            "ForkliftNodeExporterDown", f'up{{job="{export.node_job}"}} == 0', "2m", "warning",
            f"{run}: the node exporter on {{{{ $labels.host }}}} does not answer", "Node panels miss that node"))
    return {"groups": [{"name": f"forklift-{run}", "rules": rules}]}


def dashboard_queries(export: Export) -> dict[str, list[tuple[str, str]]]:
    """Panel title -> [(legend, PromQL)] (``$__rate_interval`` is Grafana's)."""
    s = _sel(export)
    r = "$__rate_interval"
    n = f'{{job="{export.node_job}"}}'

    def q(h: str, p: float) -> str:
        return f"histogram_quantile({p}, sum by (le) (rate({h}_bucket{s}[{r}]))) * 1000"

    panels = {
        "Requests running / waiting": [("running", f"sum(vllm:num_requests_running{s})"),
                                       ("waiting", f"sum(vllm:num_requests_waiting{s})")],
        "Tokens per second": [("generation", f"sum(rate(vllm:generation_tokens_total{s}[{r}]))"),
                              ("prompt", f"sum(rate(vllm:prompt_tokens_total{s}[{r}]))")],
        "TTFT (ms)": [("p50", q(m.TTFT, 0.5)), ("p95", q(m.TTFT, 0.95))],
        "TPOT (ms)": [("p50", q(m.TPOT, 0.5)), ("p95", q(m.TPOT, 0.95))],
        "KV cache use": [("{{instance}}", f"max by (instance) (vllm:kv_cache_usage_perc{s})")],
        "Prefix cache hit rate": [("hits / queries", f"sum(rate(vllm:prefix_cache_hits_total{s}[{r}])) / "
                                                     f"sum(rate(vllm:prefix_cache_queries_total{s}[{r}]))")],
        "Preemptions per second": [("preemptions", f"sum(rate(vllm:num_preemptions_total{s}[{r}]))")],
        "Speculative acceptance per position": [
            ("position {{position}}", f"sum by (position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total"
                                      f"{s}[{r}])) / scalar(sum(rate(vllm:spec_decode_num_drafts_total{s}[{r}])))")],
        "Ranks up": [("rank {{rank}} on {{host}}", f"up{s}")],
    }
    if export.bench is not None:
        panels["Tokens per second"].append(("bench baseline", f"vector({export.bench.output_tok_s:.2f})"))
    if export.node_exporters:
        panels["Node memory available (bytes)"] = [("{{host}}", f"node_memory_MemAvailable_bytes{n}")]
        panels["Node load (1m)"] = [("{{host}}", f"node_load1{n}")]
    return panels


def dashboard(export: Export) -> dict[str, Any]:
    """A Grafana dashboard (schema 39) of time-series panels over a Prometheus data source picked on import."""
    ds = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    for i, (title, queries) in enumerate(dashboard_queries(export).items()):
        unit = {"KV cache use": "percentunit", "Prefix cache hit rate": "percentunit",
                "Speculative acceptance per position": "percentunit", "TTFT (ms)": "ms", "TPOT (ms)": "ms",
                "Node memory available (bytes)": "bytes"}.get(title, "short")
        panels.append({
            "id": i + 1, "type": "timeseries", "title": title, "datasource": ds,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + j), "datasource": ds, "expr": expr, "legendFormat": legend}
                        for j, (legend, expr) in enumerate(queries)],
        })
    return {
        "title": f"forklift: {export.run}", "uid": f"forklift-{export.run}"[:40], "schemaVersion": 39,
        "tags": ["forklift", "vllm"], "time": {"from": "now-1h", "to": "now"}, "refresh": "10s",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus"}]},
        "panels": panels,
    }


HEADER = "# written by `forklift monitor export`; it rewrites this file\n"


def _ours(path: Path) -> bool:
    """Missing, or a file an export wrote (its header line; a dashboard with the forklift tag): never a file of the
    user's own that happens to share the name."""
    if not path.exists():
        return True
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    if path.suffix == ".json":
        try:
            return "forklift" in (json.loads(text).get("tags") or [])
        except (ValueError, AttributeError):
            return False
    if text.startswith(HEADER):
        return True
    try:  # an export from before the header: forklift's job or rule group names
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    names = [str(x.get("job_name", x.get("name", ""))) for x in
             ((data.get("scrape_configs") or []) + (data.get("groups") or []) if isinstance(data, dict) else [])
             if isinstance(x, dict)]
    return bool(names) and all(n.startswith("forklift-") for n in names)


def write(export: Export, out_dir: Path, *, scrape_interval_s: int = 15, force: bool = False) -> dict[str, Path]:
    """The three files under ``out_dir`` (made if missing); returns kind -> path. A file of the same name that an
    export did not write is refused (nothing written) unless ``force``."""
    paths = {kind: out_dir / name for kind, name in FILES.items()}
    theirs = [str(p) for p in paths.values() if not force and not _ours(p)]
    if theirs:
        raise MonitorError(f"{', '.join(theirs)}: not written by forklift; the export would replace it",
                           fix="Pick another directory (--out DIR), or pass --force to replace it.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths["prometheus"].write_text(HEADER + yaml.safe_dump(
            prometheus_config(export, scrape_interval_s=scrape_interval_s), sort_keys=False))
        paths["rules"].write_text(HEADER + yaml.safe_dump(alert_rules(export), sort_keys=False, width=200))
        paths["dashboard"].write_text(json.dumps(dashboard(export), indent=2) + "\n")
    except OSError as exc:
        raise MonitorError(f"cannot write the export into {out_dir}: {exc}",
                           fix="Pick a directory you can write (--out DIR).") from exc
    return paths


@dataclass(frozen=True)
class Written:
    export: Export
    files: Mapping[str, Path]

    def to_json(self) -> dict[str, Any]:
        return self.export.to_json() | {"files": {k: str(v) for k, v in self.files.items()}}


def export_run(record: RunRecord, out_dir: Path, *, probe_nodes: bool = True,
               runners: Mapping[int, Runner] | None = None, scrape_interval_s: int = 15,
               force: bool = False) -> Written:
    """Build ``record``'s export (asking its nodes for a node exporter unless ``probe_nodes`` is False) and
    write it under ``out_dir``."""
    node_exporters: list[Target] = []
    if probe_nodes:
        node_exporters = find_node_exporters(record, runners if runners is not None else record_runners(record))
    export = build(record, node_exporters=node_exporters, bench=bench_baseline(record))
    return Written(export, write(export, out_dir, scrape_interval_s=scrape_interval_s, force=force))
