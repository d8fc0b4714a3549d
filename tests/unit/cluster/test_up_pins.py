"""`up` writes what exactly it started into the run record's pins: the Hub commit that `model pull` left with
the head's weights (else a content hash, cluster/pins.py). The nodes are this machine under other names (HostSim)
and the engine a fake that dies at once, so the record is written and nothing keeps running."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from forklift import record as records
from forklift.cluster.up import up
from forklift.errors import EngineStartupError
from forklift.plan import for_launch
from tests.unit.cluster.fakes import HostSim, fake_vllm, pid_alive, two_node_recipe

COMMIT = "c0ffee" + "0" * 34


@pytest.fixture
def port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    (tmp_path / "userhome").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = int(s.getsockname()[1])
    yield free
    ranks = records.load("t").ranks if "t" in records.list_names() else []
    assert not [r.pid for r in ranks if r.pid and pid_alive(r.pid)]


def _start(tmp_path: Path, port: int) -> records.RunRecord:
    r = two_node_recipe(tmp_path, fake_vllm(tmp_path), port, "env={FAKE_MODE: worker-dies}", "timeouts.ready_s=60")
    with pytest.raises(EngineStartupError):
        up(for_launch(r, force=True), name="t", check_nodes=False, runners={0: HostSim("node-a"), 1: HostSim("node-b")})
    return records.load("t")


def test_the_pulled_commit_is_pinned(tmp_path: Path, port: int) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / ".forklift").mkdir()
    (model / ".forklift" / "source.json").write_text(json.dumps({"repo": "org/tiny", "commit": COMMIT}))
    assert _start(tmp_path, port).pins.model_revision == COMMIT


def test_without_a_pull_the_pin_is_a_content_hash(tmp_path: Path, port: int) -> None:
    record = _start(tmp_path, port)
    assert (record.pins.model_revision or "").startswith("sha256:")
    assert record.pins.image is None and record.pins.image_digest is None  # venv runtime
