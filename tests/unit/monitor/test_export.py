"""The export's content from run records: targets, rules, dashboard queries (promtool checks the files in
tests/integration/test_monitor.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from forklift import monitor
from forklift.errors import MonitorError
from forklift.launch.render import render
from forklift.monitor import export as ex
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord, benches_dir
from forklift.runner import FakeRunner


def _record(name: str, recipe: str, *sets: str) -> RunRecord:
    launch = render(for_launch(resolve(recipe, list(sets)), force=True), run_id="r" + name)
    rec = RunRecord(name=name, run_id="r" + name, plan=for_launch(resolve(recipe, list(sets)), force=True),
                    launch=launch, endpoint=launch.endpoint, served_name=launch.served_name, status="ready")
    rec.save()
    return rec


def _bench(name: str, levels: list[dict[str, object]], stamp: str = "20261201-120000") -> Path:
    folder = benches_dir(name) / stamp
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"runs": levels}))
    return folder / "results.json"


def _rules(written: dict[str, Path]) -> dict[str, dict[str, object]]:
    data = yaml.safe_load(written["rules"].read_text())
    return {r["alert"]: r for g in data["groups"] for r in g["rules"]}


def test_a_local_run_scrapes_its_endpoint_and_has_no_throughput_rule_without_a_bench(tmp_path: Path) -> None:
    rec = _record("demo", "default", "serve.port=18555")
    out = ex.export_run(rec, tmp_path / "mon", probe_nodes=False)
    prom = yaml.safe_load(out.files["prometheus"].read_text())
    assert prom["rule_files"] == ["alerts.yml"] and prom["global"]["scrape_interval"] == "15s"
    (job,) = prom["scrape_configs"]
    assert job["job_name"] == "forklift-demo" and job["metrics_path"] == "/metrics"
    assert job["static_configs"] == [{"targets": ["127.0.0.1:18555"],
                                      "labels": {"run": "demo", "host": "localhost", "rank": "0"}}]
    rules = _rules(dict(out.files))
    assert set(rules) == {"ForkliftRankDown", "ForkliftKVCacheNearFull", "ForkliftQueueGrowing",
                          "ForkliftSpecAcceptanceStuck"}
    assert rules["ForkliftRankDown"]["expr"] == 'up{job="forklift-demo"} == 0'
    assert "> 0.9" in str(rules["ForkliftKVCacheNearFull"]["expr"])
    assert "vllm-project/vllm#53030" in str(rules["ForkliftSpecAcceptanceStuck"]["annotations"])
    assert any("no saved bench" in n for n in out.export.notes)
    assert any("no node exporter" in n for n in out.export.notes)
    board = json.loads(out.files["dashboard"].read_text())
    titles = [p["title"] for p in board["panels"]]
    assert {"Requests running / waiting", "Tokens per second", "TTFT (ms)", "TPOT (ms)", "KV cache use",
            "Prefix cache hit rate", "Preemptions per second", "Speculative acceptance per position",
            "Ranks up"} <= set(titles)
    assert all(t["expr"] and '{job="forklift-demo"}' in t["expr"] for p in board["panels"] for t in p["targets"])


def test_the_throughput_rule_takes_the_newest_bench_at_its_best_level(tmp_path: Path) -> None:
    rec = _record("demo", "default")
    _bench("demo", [{"concurrency": 1, "output_tok_s": 40.0}], stamp="20261201-110000")
    newest = _bench("demo", [{"concurrency": 1, "output_tok_s": 50.0}, {"concurrency": 4, "output_tok_s": 120.0},
                             {"concurrency": 8, "output_tok_s": 300.0, "partial": True}])
    os.utime(newest, (2e9, 2e9))
    assert ex.bench_baseline(rec) == ex.BenchBaseline(120.0, 4, str(newest))
    out = ex.export_run(rec, tmp_path, probe_nodes=False)
    rule = _rules(dict(out.files))["ForkliftThroughputDrop"]
    assert rule["expr"] == ('sum(rate(vllm:generation_tokens_total{job="forklift-demo"}[5m])) < 84.0 and '
                            'sum(vllm:num_requests_running{job="forklift-demo"}) >= 4')
    board = json.loads(out.files["dashboard"].read_text())
    tok = next(p for p in board["panels"] if p["title"] == "Tokens per second")
    assert tok["targets"][-1]["expr"] == "vector(120.00)"


def test_an_unreadable_bench_is_an_error_with_a_fix() -> None:
    rec = _record("demo", "default")
    folder = benches_dir("demo") / "x"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text("{not json")
    with pytest.raises(MonitorError) as err:
        ex.bench_baseline(rec)
    assert err.value.exit_code == 2 and "forklift bench demo" in (err.value.fix or "")


def test_two_nodes_scrape_the_head_only_and_node_exporters_where_installed(tmp_path: Path) -> None:
    rec = _record("glm", "glm-4.7-nvfp4-2x-spark")
    assert [(r.rank, r.headless) for r in rec.launch.ranks] == [(1, True), (0, False)]
    head = FakeRunner("spark-a")  # probe exits 1: no exporter
    head.default_returncode = 1
    worker = FakeRunner("spark-b")  # probe exits 0: installed
    found = ex.find_node_exporters(rec, {0: head, 1: worker})
    assert [(t.host, t.address) for t in found] == [("spark-2", "192.168.100.2:9100")]
    assert worker.calls[0].argv[-1] == "9100"
    export = ex.build(rec, node_exporters=found)
    assert [(t.rank, t.address) for t in export.vllm] == [(0, "192.168.100.1:8000")]
    assert any("headless" in n for n in export.notes)
    prom = ex.prometheus_config(export)
    assert [j["job_name"] for j in prom["scrape_configs"]] == ["forklift-glm", "forklift-glm-nodes"]
    rules = {r["alert"] for g in ex.alert_rules(export)["groups"] for r in g["rules"]}
    assert "ForkliftNodeExporterDown" in rules
    assert "Node memory available (bytes)" in ex.dashboard_queries(export)


def test_an_unwritable_directory_is_an_error(tmp_path: Path) -> None:
    rec = _record("demo", "default")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(MonitorError):
        monitor.export_run(rec, blocker / "sub", probe_nodes=False)


def test_a_file_of_the_user_s_own_is_never_replaced_without_force(tmp_path: Path) -> None:
    rec = _record("demo", "default")
    out = tmp_path / "prom"
    out.mkdir()
    mine = "global: {scrape_interval: 5s}\nscrape_configs: [{job_name: mine}]\n"
    (out / "prometheus.yml").write_text(mine)
    with pytest.raises(MonitorError, match="not written by forklift") as err:
        monitor.export_run(rec, out, probe_nodes=False)
    assert "--force" in (err.value.fix or "")
    assert (out / "prometheus.yml").read_text() == mine and not (out / "alerts.yml").exists()  # nothing written
    first = monitor.export_run(rec, out, probe_nodes=False, force=True)
    again = monitor.export_run(rec, out, probe_nodes=False)  # its own files: rewritten without --force
    assert again.files == first.files and "job_name: forklift-demo" in (out / "prometheus.yml").read_text()
    for name in ("prometheus.yml", "alerts.yml"):  # an export written before the header line: still forklift's
        path = out / name
        path.write_text(path.read_text().split("\n", 1)[1])
    monitor.export_run(rec, out, probe_nodes=False)
