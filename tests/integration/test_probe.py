"""``forklift probe default`` on real vLLM-CPU (started by forklift, dummy weights): the plan made before it equals
what the engine sized, and the next ``forklift plan default --json`` uses what it measured. The figure checked is
read from the probe's own rank log, not from code. One vLLM start that reaches the KV sizing; the SIGTERM test stops
its start within seconds."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import REPO, forklift, free_port

_KV_LINE = re.compile(r"CPU KV cache size: ([0-9,]+) tokens")


def _group_alive(sid: int) -> bool:
    """Any live (non-zombie) process of the rank's session (ranks start with setsid: sid == pgid == pid)."""
    res = subprocess.run(["ps", "-o", "stat=", "-s", str(sid)], capture_output=True, text=True,  # noqa: S607
                         check=False)
    return any(not x.strip().startswith("Z") for x in res.stdout.splitlines() if x.strip())


def test_probe_default_measures_and_the_next_plan_uses_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    port = free_port()
    before = forklift("plan", "default", "--json", home=home)  # no probe yet: the planner's own arithmetic
    assert before.returncode == 0, before.stderr
    planned = json.loads(before.stdout)
    assert planned["probe"] is None
    t0 = time.monotonic()
    res = forklift("probe", "default", "--set", f"serve.port={port}", "--json", home=home)
    wall = time.monotonic() - t0
    assert res.returncode == 0, f"probe failed ({res.returncode}):\n{res.stdout}\n{res.stderr[-3000:]}"
    out = json.loads(res.stdout)
    print(f"probe default: {wall:.1f} s wall (its own {out['wall_s']} s), phases {out['phases']}")

    record = json.loads((home / "runs" / "probe-default" / "record.json").read_text())
    assert record["status"] == "stopped"
    assert record["launch"]["ranks"][0]["argv"].count("dummy") == 1  # --load-format dummy: no weights read
    for rank in record["ranks"]:  # never a process left behind
        assert rank["pgid"] and not _group_alive(rank["pgid"]), rank
    log = Path(record["ranks"][0]["log_path"]).read_text(errors="replace")
    found = _KV_LINE.findall(log)
    assert found, "the probe's rank log has no 'CPU KV cache size' line"
    logged = int(found[-1].replace(",", ""))
    assert out["probe"]["kv_tokens"] == logged
    # SmolLM2's full-attention GQA layout, planned without the engine, equals what the engine sized (the case
    # test_plan_cpu_kv covers for the other KV layouts)
    assert planned["kv_tokens"] == logged, f"planned {planned['kv_tokens']}, vLLM-CPU logged {logged}"
    stored = Path(out["path"])
    assert stored.is_file() and stored.is_relative_to(home / "probes")
    kept = Path(out["probe"]["ranks"][0]["log_path"])  # the log travels with the probe (runs/ rotates its logs)
    assert kept.parent == stored.parent and _KV_LINE.findall(kept.read_text()) == found

    plan = forklift("plan", "default", "--json", home=home)
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    assert data["probe"] is not None, data["notes"]
    assert data["probe"]["used"] == ["kv_tokens"]
    assert data["probe"]["measured"]["kv_tokens"] == logged
    assert data["kv_tokens"] == logged
    assert data["probe"]["key"] == out["probe"]["key"] and data["probe"]["differs"] == []
    assert any(f"measured {logged:,} KV tokens" in n for n in data["notes"])

    other = json.loads(forklift("plan", "default", "--json", "--set", "serve.cpu_kv_cache_gib=2", home=home).stdout)
    assert other["probe"]["used"] == ["kv_tokens"]
    assert any(d.startswith("cpu_kv_cache_gib: probed 1") for d in other["probe"]["differs"])
    assert abs(other["kv_tokens"] - 2 * logged) <= other["block_size"]


def test_sigterm_during_a_probe_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM (what `timeout` and CI send) while the engine starts: every rank stopped, exit 143."""
    home = tmp_path / "home"
    env = {**os.environ, "FORKLIFT_HOME": str(home), "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "forklift.cli.main", "probe", "default", "--set",  # noqa: S603
                             f"serve.port={free_port()}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    record_file = home / "runs" / "probe-default" / "record.json"
    deadline = time.monotonic() + 300
    pgid = None
    try:
        while time.monotonic() < deadline and pgid is None and proc.poll() is None:
            if record_file.is_file():
                ranks = json.loads(record_file.read_text()).get("ranks", [])
                pgid = ranks[0]["pgid"] if ranks else None
            time.sleep(0.5)
        assert pgid is not None, "the probe never started its rank"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-2000:]
    assert not _group_alive(pgid)
    assert json.loads(record_file.read_text())["status"] == "stopped"
