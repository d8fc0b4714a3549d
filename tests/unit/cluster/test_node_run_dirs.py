"""`up` keeps one run folder per deployment name on each remote node: earlier runs' folders go."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift import recipe as recipes
from forklift.cluster.start import node_paths, prepare_nodes
from tests.unit.cluster.fakes import HostSim


def test_earlier_runs_of_the_name_are_removed_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    nodes = tmp_path / ".local" / "state" / "forklift" / "nodes"
    stale = [nodes / "t.1-aaaaaaaaaaaa", nodes / "t.1-0123456789ab"]
    kept = [nodes / "t.1-b-0123456789ab", nodes / "tx1-aaaaaaaaaaaa", nodes / "t.1-short", nodes / "zt.1-aaaaaaaaaaaa"]
    for d in stale + kept:
        d.mkdir(parents=True)
        (d / "rank0.log").write_text("old\n")
    r = recipes.load("default", ["nodes=[{host: node-a, ssh: root@10.231.0.9}]"])
    runners = {0: HostSim("node-a")}
    paths = node_paths(r, "t.1", "ffffffffffff", runners)
    prepare_nodes(r, "t.1", paths, runners)
    current = Path(paths[0].run_dir)
    assert current == nodes / "t.1-ffffffffffff" and (current / "vllm_main.py").is_file()
    assert [d for d in stale if d.exists()] == []
    assert [d for d in kept if not d.exists()] == []
    prepare_nodes(r, "t.1", node_paths(r, "t.1", "eeeeeeeeeeee", runners), runners)
    assert not current.exists() and (nodes / "t.1-eeeeeeeeeeee").is_dir()
