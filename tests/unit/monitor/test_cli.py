"""`forklift top` and `forklift monitor export` through the real CLI, without an engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from forklift.launch.render import render
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RunRecord
from tests.helpers import forklift, free_port


def _saved(name: str, port: int) -> RunRecord:
    plan = for_launch(resolve("default", [f"serve.port={port}"]))
    launch = render(plan, run_id="r1")
    rec = RunRecord(name=name, run_id="r1", plan=plan, launch=launch, endpoint=launch.endpoint,
                    served_name=launch.served_name, status="ready")
    rec.save()
    return rec


def test_top_without_runs_or_with_an_unknown_run_exits_2() -> None:
    res = forklift("top", "--once")
    assert res.returncode == 2 and "MonitorError" in res.stderr and "forklift up" in res.stderr
    res = forklift("top", "nosuch", "--once", "--json")
    assert res.returncode == 2 and "RunNotFoundError" in res.stderr


def test_top_once_json_on_a_run_that_does_not_answer_exits_1_with_the_reason_and_the_node() -> None:
    _saved("gone", free_port())
    res = forklift("top", "--once", "--json", "--interval", "0.1")
    assert res.returncode == 1, res.stderr
    snap = json.loads(res.stdout)
    (run,) = snap["runs"]
    assert run["name"] == "gone" and run["up"] is False and "GET /metrics failed" in run["error"]
    (node,) = snap["nodes"]
    assert node["host"] == "localhost" and node["mem_available_bytes"] > 0 and node["error"] is None


def test_top_once_json_loads_no_other_command(tmp_path: Path) -> None:
    _saved("gone", free_port())
    code = ("import runpy, sys, json\n"
            "sys.argv = ['forklift', 'top', '--once', '--json', '--interval', '0.1']\n"
            "try:\n    runpy.run_module('forklift.cli.main', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          env=dict(os.environ))
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert json.loads(done.stdout)["runs"][0]["name"] == "gone"
    # rich is not checked: httpx/_main.py imports it (console, progress, live, table) whenever it is installed
    for name in ("forklift.bench", "forklift.check", "forklift.canary", "forklift.doctor",
                 "forklift.cli.status", "forklift.cli.monitor"):
        assert name not in loaded, name


def test_monitor_export_writes_the_three_files(tmp_path: Path) -> None:
    _saved("demo", 18444)
    res = forklift("monitor", "export", "demo", "--out", str(tmp_path / "mon"), "--no-probe-nodes", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["vllm_targets"] == [{"address": "127.0.0.1:18444", "host": "localhost", "rank": 0}]
    assert sorted(Path(p).name for p in out["files"].values()) == ["alerts.yml", "grafana-dashboard.json",
                                                                    "prometheus.yml"]
    res = forklift("monitor", "export", "demo", "--out", str(tmp_path / "mon2"), "--no-probe-nodes")
    assert res.returncode == 0 and "promtool check config" in res.stdout and "no saved bench" in res.stdout
    assert forklift("monitor", "export", "nosuch", "--out", str(tmp_path)).returncode == 2
