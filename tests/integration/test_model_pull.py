"""`forklift model pull` onto this machine, end to end: the CLI, the node program it starts, a local Hub
(tests/hubserver.py, a subprocess; Hugging Face itself is not reachable here).

Interrupted with Ctrl-C half way, the pull stops its download process and a second pull continues the partial
file with a Range request; the token is never in any output, file or process argv; a corrupted download fails
naming the file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import free_port
from tests.modelgen import make_model

TOKEN = "hf_integration_secret_77c1e0"
SHARD = "model-00003-of-00005.safetensors"


@dataclass
class Hub:
    url: str
    commit: str
    log: Path
    proc: subprocess.Popen[str]

    def requests(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


def _serve(tmp: Path, *extra: str) -> Iterator[Hub]:
    model = tmp / "served"
    if not model.exists():
        make_model(model, layer_bytes=1 << 20)
    port, log = free_port(), tmp / f"hub-{len(list(tmp.glob('hub-*.jsonl')))}.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tests.hubserver", "--port", str(port), "--repo",
                             f"org/tiny={model}", "--log", str(log), *extra],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, HUBSERVER_TOKEN=TOKEN))
    assert proc.stdout is not None
    ready = proc.stdout.readline().split()
    try:
        yield Hub(ready[3], ready[2], log, proc)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def slow_hub(tmp_path: Path) -> Iterator[Hub]:
    yield from _serve(tmp_path, "--rate", str(1 << 18))  # slow enough that a loaded machine cannot finish first


def _env(tmp: Path, hub: Hub) -> dict[str, str]:
    return dict(os.environ, HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN, HF_HUB_DISABLE_XET="1", HF_HOME=str(tmp / "hf"),
                FORKLIFT_HOME=str(tmp / "home"), FORKLIFT_CACHE=str(tmp / "cache"))


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "forklift.cli.main", "model", "pull", *args]


def _cmdlines() -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return out


def _partials(tmp: Path) -> list[Path]:
    return list((tmp / "hf").glob("hub/models--org--tiny/blobs/*.forklift-partial"))


def test_interrupted_pull_stops_its_download_and_resumes_it_without_leaking_the_token(
        tmp_path: Path, slow_hub: Hub) -> None:
    env = _env(tmp_path, slow_hub)
    # Ctrl-C as a terminal sends it: a shell that started this suite in the background left SIGINT ignored,
    # which children inherit (and Python then installs no KeyboardInterrupt handler)
    first = subprocess.Popen(_argv("org/tiny", "--json"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    deadline, seen = time.monotonic() + 60, []
    while time.monotonic() < deadline and not any(p.stat().st_size > 300_000 for p in _partials(tmp_path)):
        seen += _cmdlines()
        time.sleep(0.05)
    assert any(p.stat().st_size > 300_000 for p in _partials(tmp_path)), "no partial download appeared"
    helper = [c for c in _cmdlines() if "hub_fetch.py" in c and str(tmp_path) in c]
    assert helper, "the download runs as its own process"
    first.send_signal(signal.SIGINT)
    out1, err1 = first.communicate(timeout=60)
    assert first.returncode == 130
    gone_by = time.monotonic() + 15  # a loaded machine may take a moment to reap it
    while time.monotonic() < gone_by and [c for c in _cmdlines() if "hub_fetch.py" in c and str(tmp_path) in c]:
        time.sleep(0.1)
    assert not [c for c in _cmdlines() if "hub_fetch.py" in c and str(tmp_path) in c], "download outlived Ctrl-C"
    kept = {p.name: p.stat().st_size for p in _partials(tmp_path)}
    assert kept and max(kept.values()) > 0  # data a killed run leaves in partial files (1 MiB steps)

    second = subprocess.run(_argv("org/tiny", "--json"), env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    (node,) = report["nodes"]
    assert report["commit"] == slow_hub.commit and node["verified"] == len(node["files"]) and not node["error"]
    assert node["downloaded"] < node["bytes"]  # what the first run left was not fetched again
    ranges = [r["range"] for r in slow_hub.requests() if r["range"]]
    assert any(int(str(r).removeprefix("bytes=").split("-")[0]) > 0 for r in ranges), ranges
    assert not _partials(tmp_path)
    snapshot = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / slow_hub.commit
    assert (snapshot / SHARD).read_bytes() == (tmp_path / "served" / SHARD).read_bytes()

    texts = [out1, err1, second.stdout, second.stderr, *seen, *_cmdlines()]
    assert not [t for t in texts if TOKEN in t], "the token appeared in an output or a process argv"
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert TOKEN.encode() not in path.read_bytes(), f"the token is in {path}"
    hub_calls = [r for r in slow_hub.requests() if "/resolve/" in str(r["path"]) or "/api/models/" in str(r["path"])]
    assert hub_calls and all(r["auth"] for r in hub_calls)  # the token was used, on the Hub's own paths only


@pytest.fixture
def corrupting_hub(tmp_path: Path) -> Iterator[Hub]:
    yield from _serve(tmp_path, "--corrupt", SHARD)


def test_a_corrupted_download_fails_naming_the_file(tmp_path: Path, corrupting_hub: Hub) -> None:
    res = subprocess.run(_argv("org/tiny"), env=_env(tmp_path, corrupting_hub), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1
    assert SHARD in res.stderr and "sha256 mismatch" in res.stderr and "localhost" in res.stderr
    storage = tmp_path / "hf" / "hub" / "models--org--tiny"
    assert not (storage / "snapshots" / corrupting_hub.commit / SHARD).exists()
    assert not list(storage.glob("blobs/*.forklift-partial"))
