"""The program each node runs to download its files (forklift.engine.hub_fetch), called in this process against
the local Hub: both layouts, resume from a partial file with a Range request, a corrupted download caught by
sha256, a wrong local file replaced, nothing fetched twice."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from forklift.engine import hub_fetch
from forklift.model import hub
from tests.hubserver import HubServer
from tests.unit.model.conftest import TOKEN

SHARD = "model-00003-of-00005.safetensors"


def _spec(kind: str, dest: Path, names: list[str] | None = None) -> dict[str, Any]:
    snap = hub.snapshot("org/tiny", None, hf_token=TOKEN)
    files = [f.spec() for f in snap.files if names is None or f.name in names]
    return {"repo": "org/tiny", "commit": snap.commit, "revision": "main", "endpoint": hub.endpoint(),
            "dest": {"kind": kind, "path": str(dest)}, "files": files, "workers": 2}


def _run(spec: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    code = hub_fetch.run(spec)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return code, events


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dir_layout_downloads_verifies_and_pins(hub_server: HubServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    repo = hub_server.repos["org/tiny"]
    spec = _spec("dir", tmp_path / "model", ["config.json", SHARD, "model.safetensors.index.json"])
    code, events = _run(spec, capsys)
    assert code == 0 and events[-1]["event"] == "done"
    for name in ("config.json", SHARD, "model.safetensors.index.json"):
        assert _sha(tmp_path / "model" / name) == _sha(repo.folder / name)
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == sorted(
        [".forklift", "config.json", SHARD, "model.safetensors.index.json"])
    pin = json.loads((tmp_path / "model" / ".forklift" / "source.json").read_text())
    assert pin["commit"] == repo.commit and pin["repo"] == "org/tiny"
    assert all(TOKEN not in p.read_text(errors="replace") for p in (tmp_path / "model").rglob("*") if p.is_file())
    gets = len([r for r in hub_server.requests if r["method"] == "GET"])
    code, events = _run(spec, capsys)  # again: everything present and remembered as verified, nothing fetched
    assert code == 0 and {e["status"] for e in events if e["event"] == "file"} == {"present"}
    assert len([r for r in hub_server.requests if r["method"] == "GET"]) == gets


def test_cache_layout_is_what_huggingface_hub_reads_offline(hub_server: HubServer, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    repo = hub_server.repos["org/tiny"]
    code, _ = _run(_spec("cache", tmp_path / "hub"), capsys)
    assert code == 0
    storage = tmp_path / "hub" / "models--org--tiny"
    assert (storage / "refs" / "main").read_text() == repo.commit
    link = storage / "snapshots" / repo.commit / SHARD
    assert link.is_symlink() and Path(os.path.realpath(link)).name == repo.files[SHARD].sha256
    from huggingface_hub import snapshot_download

    found = snapshot_download("org/tiny", cache_dir=str(tmp_path / "hub"), local_files_only=True)
    assert Path(found) == storage / "snapshots" / repo.commit


def test_a_partial_file_is_continued_with_a_range_request(hub_server: HubServer, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    data = (hub_server.repos["org/tiny"].folder / SHARD).read_bytes()
    spec = _spec("dir", tmp_path / "model", [SHARD])
    fx = hub_fetch.Fetcher(spec)
    part = fx.partial_path(spec["files"][0])
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:100_000])  # what a killed run left
    code, events = _run(spec, capsys)
    assert code == 0
    (done,) = [e for e in events if e["event"] == "file"]
    assert done["status"] == "resumed" and done["bytes"] == len(data) - 100_000
    assert [r["range"] for r in hub_server.requests if r["path"].startswith("/cdn/")] == ["bytes=100000-"]
    assert (tmp_path / "model" / SHARD).read_bytes() == data and not part.exists()


def test_a_corrupted_download_is_caught_and_removed(hub_server: HubServer, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    hub_server.corrupt.add(SHARD)  # the bytes differ, the listing keeps the true sha256
    code, events = _run(_spec("dir", tmp_path / "model", ["config.json", SHARD]), capsys)
    assert code == 1
    assert events[-1]["event"] == "error" and events[-1]["file"] == SHARD and "sha256 mismatch" in events[-1]["message"]
    assert not (tmp_path / "model" / SHARD).exists()
    assert not list((tmp_path / "model" / ".forklift" / "partial").iterdir())  # nothing half-trusted stays


def test_a_wrong_local_file_of_the_right_size_is_fetched_again(hub_server: HubServer, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = (hub_server.repos["org/tiny"].folder / SHARD).read_bytes()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / SHARD).write_bytes(bytes(len(data)))
    code, events = _run(_spec("dir", tmp_path / "model", [SHARD]), capsys)
    assert code == 0 and [e["status"] for e in events if e["event"] == "file"] == ["downloaded"]
    assert (tmp_path / "model" / SHARD).read_bytes() == data
