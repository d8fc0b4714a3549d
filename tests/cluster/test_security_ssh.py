"""Injection over a real sshd in a network namespace: env values and spawned commands reach the node as data,
refused env names and ssh destinations never reach ssh, and the canary file never appears on the node.

The nodes are reachable only from inside the namespaces, so each probe runs a short program in node-a's namespace
that drives forklift's SshRunner against node-b's sshd and reports back as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cluster.netns import NetCluster
from tests.unit.security.test_injection import ATTACKS, POC_KEY

pytestmark = pytest.mark.cluster
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES_SSH", "12"))
"""Each example is a program start and an ssh round trip: 12 in CI."""

_PROGRAM = """
import json, sys
from forklift.errors import ForkliftError
from forklift.runner.ssh import SshRunner
job = json.loads(sys.stdin.read())
out = {}
try:
    runner = SshRunner(job["target"], name="node-b", ssh_config=job["config"])
    if job["kind"] == "run":
        res = runner.run(job["argv"], env=job["env"])
        out = {"rc": res.returncode, "stdout": res.stdout}
    else:
        out = {"pid": runner.spawn(job["argv"], log_path=job["log"], env=job["env"]).pid}
except ForkliftError as exc:
    out = {"error": type(exc).__name__, "message": str(exc)}
print(json.dumps(out))
"""


def _on_node_a(net: NetCluster, **job: Any) -> dict[str, Any]:
    job.setdefault("target", net.nodes[1].target)
    job.setdefault("config", str(net.ssh_config))
    res = subprocess.run(net.exec_argv(0, sys.executable, "-c", _PROGRAM), input=json.dumps(job),
                         capture_output=True, text=True, timeout=120, check=False,
                         env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src")))
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_env_values_arrive_as_data_over_ssh(net: NetCluster, tmp_path: Path, data: st.DataObject) -> None:
    canary = tmp_path / "CANARY"  # the namespaces share this filesystem: a file made on the node shows here
    surrogates: tuple[Literal["Cs"]] = ("Cs",)  # typed: hypothesis's decorator loses the Literal context
    chars = st.characters(exclude_characters="\0\r", exclude_categories=surrogates)
    value = data.draw(st.one_of(st.sampled_from([a.format(c=canary) for a in ATTACKS]), st.text(chars, max_size=30)))
    out = _on_node_a(net, kind="run", argv=["printenv", "FORKLIFT_FUZZ"], env={"FORKLIFT_FUZZ": value})
    assert not canary.exists()
    assert out == {"rc": 0, "stdout": value + "\n"}


def test_spawn_with_hostile_values_runs_only_the_argv(net: NetCluster, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    log = tmp_path / "spawned.log"
    env = {f"V{i}": a.format(c=canary) for i, a in enumerate(ATTACKS)}
    out = _on_node_a(net, kind="spawn", argv=["sh", "-c", 'printf "%s" "$V0"'], env=env, log=str(log))
    assert out.get("pid", 0) > 0, out
    for _ in range(100):
        if log.exists() and log.read_text():
            break
        time.sleep(0.1)
    assert log.read_text() == env["V0"] and not canary.exists()


def test_refused_names_and_targets_never_reach_ssh(net: NetCluster, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    refused = _on_node_a(net, kind="run", argv=["true"], env={POC_KEY: "1"})
    assert refused["error"] == "EnvNameError"
    target = _on_node_a(net, kind="run", argv=["true"], env={}, target=f"-oProxyCommand=touch {canary}")
    assert target["error"] == "SshTargetError"
    assert not canary.exists()
