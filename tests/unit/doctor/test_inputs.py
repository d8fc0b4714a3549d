"""What people paste is read: one error line, a traceback without timestamps, an issue body in markdown, a
``docker logs`` dump, journalctl and dmesg output, Windows line endings. Only empty or binary input exits 2.

Every seed wall (tests/data/doctor/seeds/walls.yaml: the seeds' own sentences and log lines) is pasted alone on
stdin, as a user would, and must come back with the seed's fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from forklift.cli.main import app

from .conftest import DATA

runner = CliRunner(env={"COLUMNS": "250"})
WALLS: list[dict[str, Any]] = yaml.safe_load((DATA / "seeds" / "walls.yaml").read_text())["walls"]

# Seed 002's wall as the issue quotes it (the seed's own patch list writes it without "out of resource:").
SMEM = "OutOfResources: out of resource: shared memory, Required: 102400, Hardware limit: 101376"
TRACEBACK = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/quantization/kv_cache.py", line 88, in load
    param.weight_loader(param, loaded_weight, shard_id)
TypeError: KVCacheScaleParameter.weight_loader() takes 2 positional arguments but 3 were given
"""
ISSUE_BODY = """\
### Your current environment

vllm 0.11.0, 2x DGX Spark, TP=1 PP=2

### 🐛 Describe the bug

The server never comes up on the second node. Log from the worker:

```text
(EngineCore_DP0 pid=311) ERROR 10-02 11:02:14 [core.py:708] ValueError: No available memory for the cache blocks. \
Try increasing `gpu_memory_utilization` when initializing the engine.
```

### Before submitting a new issue...

- [x] Make sure you already searched for relevant issues.
"""
DOCKER_LOGS = """\
2026-12-01T10:00:01.123456789Z INFO 12-01 10:00:01 [api_server.py:1814] vLLM API server version 0.11.0
2026-12-01T10:00:09.223456789Z INFO 12-01 10:00:09 [gpu_model_runner.py:2602] Starting to load model /models/glm
2026-12-01T10:03:12.323456789Z (RayWorkerWrapper pid=311) ERROR 12-01 10:03:12 [worker_base.py:620] \
ray.exceptions.ActorHandleNotFoundError: ActorHandle objects are not valid across Ray sessions.
"""
DMESG = """\
[ 9339.101] docker0: port 1(veth3c2) entered forwarding state
[ 9341.552] Out of memory: Killed process 311 (python3) total-vm:141233212kB, anon-rss:8123112kB, file-rss:0kB
[ 9341.610] oom_reaper: reaped process 311 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB
"""
JOURNAL = """\
Mar 27 17:40:36 spark-a kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=2231, name=python3, GPU has fallen off the bus.
Mar 27 17:40:36 spark-a kernel: NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.
"""


def _doctor(text: str | bytes) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, ["doctor", "--json", "-"], input=text)
    return res.exit_code, (json.loads(res.stdout) if res.exit_code in (0, 1) else {"output": res.output})


def _top(data: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in data["findings"] if f["severity"] != "info")


@pytest.mark.parametrize(("name", "text", "category"), [
    ("one error line", SMEM + "\n", "triton_shared_memory"),
    ("one error line without a newline", SMEM, "triton_shared_memory"),
    ("a traceback without timestamps", TRACEBACK, "weight_loader_signature_drift"),
    ("an issue body in markdown", ISSUE_BODY, "kv_cache_insufficient"),
    ("a docker logs dump", DOCKER_LOGS, "ray_actor_or_session"),
    ("dmesg", DMESG, "oom_host_unified_memory"),
    ("journalctl -k", JOURNAL, "cuda_driver_or_device"),
    ("Windows line endings", TRACEBACK.replace("\n", "\r\n"), "weight_loader_signature_drift"),
    ("Windows line endings, one line", SMEM + "\r\n", "triton_shared_memory"),
])
def test_what_people_paste_is_read_and_diagnosed(name: str, text: str, category: str) -> None:
    code, data = _doctor(text)
    assert code == 1, (name, data)
    top = _top(data)
    assert top["category"] == category, (name, top["rule"])
    assert top["evidence"], name


def test_the_seed_002_line_gets_the_patch() -> None:
    code, data = _doctor(SMEM + "\n")
    assert code == 1 and "triton-mla-decode-num-stages" in _top(data)["fix"]


@pytest.mark.parametrize("wall", WALLS, ids=[w["name"] for w in WALLS])
def test_each_wall_pasted_alone_on_stdin_gets_the_seeds_fix(wall: dict[str, Any]) -> None:
    code, data = _doctor(wall["text"] + "\n")
    assert code == 1, (wall["name"], data)
    top = _top(data)
    assert top["category"] == wall["category"], (wall["name"], top["rule"])
    assert data["unsure"] is False
    missing = [k for k in wall["fix"] if k not in top["fix"]]
    assert missing == [], (wall["name"], top["fix"])


def test_text_with_no_failure_is_read_and_gives_no_finding(tmp_path: Path) -> None:
    prose = tmp_path / "list.txt"
    prose.write_text("apples\nbananas\nthe shopping list for sunday\n")
    res = runner.invoke(app, ["doctor", str(prose)])
    assert res.exit_code == 0, res.output
    assert "no failure found" in res.stdout


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "is empty"), (b"\n  \n\r\n", "is empty"), (bytes(range(256)) * 100, "is binary"),
    (b"\x1f\x8b\x08\x00" + bytes(range(1, 256)) * 40, "is binary"),
])
def test_only_empty_or_binary_input_exits_2(tmp_path: Path, data: bytes, reason: str) -> None:
    path = tmp_path / "in.log"
    path.write_bytes(data)
    res = runner.invoke(app, ["doctor", str(path)])
    assert res.exit_code == 2 and reason in res.output, res.output
