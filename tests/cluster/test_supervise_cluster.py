"""The supervisor on the namespace cluster: pp=2 across node-a and node-b (real vLLM-CPU ranks, native multi-node),
started with `forklift up --supervise`. kill -9 of the worker rank on node-b -> the supervisor sees it over SSH,
stops the whole deployment, starts it again in start order (worker first) and a chat answers again; the time from
the kill to serving is printed and bounded. One restart only: each pp=2 start compiles on 2 cores (~3-5 min)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.cluster.netns import NetCluster
from tests.cluster.test_netns_cluster import _chat, _nothing_left, _recipe, forklift

pytestmark = pytest.mark.cluster
RECOVERY_BOUND_S = 900.0


def _supervisor(net: NetCluster) -> dict[str, object]:
    res = forklift(net, "status", "sv", "--json")
    assert res.returncode == 0, res.stderr
    sup = json.loads(res.stdout)["supervisor"]
    assert isinstance(sup, dict)
    return sup


def test_a_killed_worker_rank_is_restarted_with_the_whole_deployment(net: NetCluster) -> None:
    recipe = _recipe(net)
    text = recipe.read_text() + "supervise: {interval_s: 3, backoff_s: 1, max_restarts: 1, memory_check: never}\n"
    recipe = recipe.with_name("pp2-supervised.yaml")
    recipe.write_text(text)
    res = forklift(net, "up", str(recipe), "--name", "sv", "--supervise", "--json")
    assert res.returncode == 0, f"up failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    try:
        worker = next(r for r in json.loads(res.stdout)["ranks"] if r["rank"] == 1)
        deadline = time.monotonic() + 60
        while _supervisor(net)["state"] != "watching":
            assert time.monotonic() < deadline, _supervisor(net)
            time.sleep(1)
        os.killpg(int(worker["pgid"]), signal.SIGKILL)  # namespaces share the pid space: rank 1 on node-b
        killed = time.monotonic()
        while True:
            assert time.monotonic() - killed < RECOVERY_BOUND_S, _supervisor(net)
            sup = _supervisor(net)
            if sup.get("last_recovery_at") and sup["state"] == "watching":
                break
            time.sleep(2)
        assert "4" in _chat(net, "What is 2+2?")
        took = time.monotonic() - killed
        print(f"\npp=2 worker killed -> serving again in {took:.0f} s (supervisor: {sup['last_recovery_s']} s from "
              f"noticing); cause: {sup['last_cause']}")
        assert "rank 1 on node-b" in str(sup["last_cause"])
        status = json.loads(forklift(net, "status", "sv", "--json").stdout)
        assert status["status"] == "ready" and status["alive_ranks"] == [0, 1]
    finally:
        down = forklift(net, "down", "sv", "--json")
    assert down.returncode == 0, down.stderr
    assert "supervisor pid" in str(json.loads(down.stdout)["supervisor"])
    _nothing_left(net)
