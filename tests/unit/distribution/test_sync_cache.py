"""model sync for a Hub id read from each node's Hugging Face cache: the target gets the source's snapshot (files,
not links into blobs) and the ref vLLM resolves offline. Two "nodes" on this machine with their own HF_HOME."""

from __future__ import annotations

import os
from pathlib import Path

from forklift import recipe as recipes
from forklift.distribution.sync import sync
from forklift.runner import LocalRunner
from tests.modelgen import expected_files, make_model

COMMIT = "1234567890abcdef1234567890abcdef12345678"


def _snapshot(hf_home: Path, source: Path) -> Path:
    """A cache as huggingface_hub leaves it: blobs, a snapshot of relative links, refs/main."""
    repo = hf_home / "hub" / "models--org--tiny"
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in source.iterdir():
        blob = repo / "blobs" / f"blob-{f.name}"
        blob.write_bytes(f.read_bytes())
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snap


def test_cache_layout_sync_places_the_snapshot_and_its_ref(tmp_path: Path) -> None:
    source = make_model(tmp_path / "m", layers=6, stages=2, layer_bytes=64 << 10)
    snap = _snapshot(tmp_path / "hf-a", source)
    r = recipes.load("default", [
        "model.source=org/tiny", "parallel.pp=2",
        f"nodes=[{{host: localhost, env: {{HF_HOME: {tmp_path / 'hf-a'}}}}}, "
        f"{{host: 127.0.0.1, env: {{HF_HOME: {tmp_path / 'hf-b'}}}}}]"])
    report = sync(r, {0: LocalRunner(), 1: LocalRunner()})
    assert report.source_path == str(snap)
    assert [n.method for n in report.nodes] == ["source", "rsync"]
    target = tmp_path / "hf-b" / "hub" / "models--org--tiny"
    assert (target / "refs" / "main").read_text() == COMMIT
    got = target / "snapshots" / COMMIT
    assert sorted(p.name for p in got.iterdir()) == expected_files(1, stages=2)
    assert all(not p.is_symlink() and p.read_bytes() == (source / p.name).read_bytes() for p in got.iterdir())
    assert report.nodes[1].transferred == sum(p.stat().st_size for p in got.iterdir())
    again = sync(r, {0: LocalRunner(), 1: LocalRunner()})
    assert again.nodes[1].method == "skip"
