"""Injection over a real sshd in a network namespace: env values and spawned commands reach the node as data,
refused env names and ssh destinations never reach ssh, and the canary file never appears on the node."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forklift.errors import EnvNameError, SshTargetError
from forklift.runner.ssh import SshRunner
from tests.cluster.netns import NetCluster
from tests.unit.security.test_injection import ATTACKS, POC_KEY

pytestmark = pytest.mark.cluster
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES_SSH", "15"))
"""Each example is an ssh round trip (multiplexed): 15 in CI."""


def _runner(net: NetCluster) -> SshRunner:
    return SshRunner(net.nodes[0].target, name="n1", ssh_config=str(net.ssh_config))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_env_values_arrive_as_data_over_ssh(net: NetCluster, tmp_path: Path, data: st.DataObject) -> None:
    canary = tmp_path / "CANARY"  # the namespace shares this filesystem: a file made on the node shows here
    value = data.draw(st.one_of(st.sampled_from([a.format(c=canary) for a in ATTACKS]),
                                st.text(st.characters(blacklist_characters="\0\r", blacklist_categories=("Cs",)),
                                        max_size=30)))
    res = _runner(net).run(["printenv", "FORKLIFT_FUZZ"], env={"FORKLIFT_FUZZ": value})
    assert not canary.exists()
    assert res.returncode == 0 and res.stdout == value + "\n"


def test_spawn_with_hostile_values_runs_only_the_argv(net: NetCluster, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    out = tmp_path / "spawned.log"
    env = {f"V{i}": a.format(c=canary) for i, a in enumerate(ATTACKS)}
    spawned = _runner(net).spawn(["sh", "-c", 'printf "%s" "$V0"'], log_path=str(out), env=env)
    assert spawned.pid > 0
    for _ in range(50):
        if out.exists() and out.read_text():
            break
        time.sleep(0.1)
    assert out.read_text() == env["V0"] and not canary.exists()


def test_refused_names_and_targets_never_reach_ssh(net: NetCluster, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    with pytest.raises(EnvNameError):
        _runner(net).run(["true"], env={POC_KEY: "1"})
    with pytest.raises(SshTargetError):
        SshRunner(f"-oProxyCommand=touch {canary}", ssh_config=str(net.ssh_config))
    assert not canary.exists()
