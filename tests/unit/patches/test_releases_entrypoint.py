"""Release archives (sdist and wheel layouts, fetch with sha256 check) and the docker entrypoint text."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

from forklift import patches
from forklift.errors import PatchError
from forklift.patches import releases

KV_REL = "model_executor/layers/quantization/kv_cache.py"


def make_sdist(path: Path, files: dict[str, bytes], version: str = "9.9.9") -> Path:
    with tarfile.open(path, "w:gz") as t:
        for rel, data in files.items():
            info = tarfile.TarInfo(f"vllm-{version}/vllm/{rel}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_parse_requirement() -> None:
    assert releases.parse_requirement("vllm==0.26.0") == "0.26.0"
    assert releases.parse_requirement("0.11.0") == "0.11.0"
    for bad in ("vllm>=0.2", "torch==2.0", "vllm==banana"):
        with pytest.raises(PatchError, match="--against"):
            releases.parse_requirement(bad)


def test_archive_reads_sdist_and_wheel_layouts(tmp_path: Path) -> None:
    sd = releases.ReleaseArchive(make_sdist(tmp_path / "vllm-9.9.9.tar.gz", {"a/b.py": b"x = 1\n"}))
    assert sd.read("a/b.py") == b"x = 1\n" and sd.read("a/c.py") is None
    whl = tmp_path / "vllm-9.9.9-cp38-abi3-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("vllm/a/b.py", b"y = 2\n")
    assert releases.ReleaseArchive(whl).read("a/b.py") == b"y = 2\n"


def _index(sdist: bytes, *, sha: str | None = None, size: int | None = None) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/simple/vllm/":
            return httpx.Response(200, json={"files": [
                {"filename": "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl", "url": "https://f/whl",
                 "size": 300_000_000, "hashes": {}},
                {"filename": "vllm-9.9.9.tar.gz", "url": "https://f/sdist", "size": size or len(sdist),
                 "hashes": {"sha256": sha or hashlib.sha256(sdist).hexdigest()}},
            ]})
        if request.url.path == "/sdist":
            return httpx.Response(200, content=sdist)
        return httpx.Response(404)
    return httpx.MockTransport(handler)


def test_fetch_picks_the_sdist_checks_sha_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKLIFT_CACHE", str(tmp_path / "cache"))
    data = make_sdist(tmp_path / "src.tar.gz", {KV_REL: b"pass\n"}).read_bytes()
    with httpx.Client(transport=_index(data)) as client:
        path = releases.fetch("9.9.9", index_url="https://idx/simple", client=client)
    assert path.name == "vllm-9.9.9.tar.gz" and path.read_bytes() == data
    assert releases.fetch("9.9.9") == path  # cached: no client needed


def test_fetch_rejects_bad_hash_and_huge_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKLIFT_CACHE", str(tmp_path / "cache"))
    data = b"not really a tarball"
    with httpx.Client(transport=_index(data, sha="0" * 64)) as client, pytest.raises(PatchError, match="sha256"):
        releases.fetch("9.9.9", index_url="https://idx/simple", client=client)
    assert not list((tmp_path / "cache").rglob("*.tar.gz*"))
    with httpx.Client(transport=_index(data, size=10**9)) as client, pytest.raises(PatchError, match="MB"):
        releases.fetch("9.9.9", index_url="https://idx/simple", client=client)


def test_check_releases_against_a_cached_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKLIFT_CACHE", str(tmp_path))
    d = releases.releases_dir()
    d.mkdir(parents=True)
    make_sdist(d / "vllm-0.30.0.tar.gz", {"_version.py": b"__version__ = '0.30.0'\n"}, version="0.30.0")
    report = patches.check_releases(["0.30.0"], patches.get(["kv-scale-loader-args"]))
    cell = report.cells[("kv-scale-loader-args", "0.30.0")]
    assert cell.status == "vanished" and cell.in_range is True
    out = report.to_json()
    assert out["patches"][0]["results"]["0.30.0"]["status"] == "vanished"
    json.dumps(out)


def test_entrypoint_renders_program_spec_and_exec() -> None:
    ps = patches.get(["kv-scale-loader-args", "safetensors-fadvise-dontneed"])
    text = patches.render_entrypoint(ps, python="/usr/bin/python3")
    assert text.startswith("#!/bin/sh\n")
    assert "applies kv-scale-loader-args, safetensors-fadvise-dontneed" in text
    assert patches.operations.core_source() in text
    assert '"${FORKLIFT_PATCH_PYTHON:-/usr/bin/python3}" -c "$FORKLIFT_PATCH_PROGRAM" entry' in text
    assert text.rstrip().endswith('if [ "$#" -gt 0 ]; then exec "$@"; fi')
    spec_line = next(ln for ln in text.splitlines() if ln.startswith("FORKLIFT_PATCH_SPEC="))
    payload = spec_line.removeprefix("FORKLIFT_PATCH_SPEC=")
    assert payload.startswith("'") and payload.endswith("'")
    spec = json.loads(payload[1:-1].replace("'\"'\"'", "'"))
    assert [e["patch"]["id"] for e in spec["patches"]] == ["kv-scale-loader-args", "safetensors-fadvise-dontneed"]
    assert [e["ignore_version"] for e in spec["patches"]] == [False, False]
