"""The hooks' audit writer, run by the gateway's own Python (its venv has LiteLLM): the log rotates past its size
and keeps five older files, which `gateway usage` reads oldest first."""

from __future__ import annotations

import os
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from forklift import gateway
from forklift.gateway.ops import LITELLM_ENV, LITELLM_VERSION

pytestmark = pytest.mark.unit
LITELLM = os.environ.get(LITELLM_ENV) or str(
    Path.home() / ".cache" / "forklift" / "gateway-venvs" / f"litellm-{LITELLM_VERSION}" / "bin" / "litellm")
PYTHON = Path(LITELLM).with_name("python")


@pytest.mark.skipif(not PYTHON.exists(), reason="the gateway's venv is not here (`make fixtures` makes it)")
def test_the_audit_log_rotates_and_usage_reads_every_file() -> None:
    d = gateway.gateway_dir()
    d.mkdir(parents=True, exist_ok=True)
    hooks = resources.files("forklift.gateway.proxy").joinpath("forklift_gateway_hooks.py").read_text()
    (d / "forklift_gateway_hooks.py").write_text(hooks)
    code = ("import forklift_gateway_hooks as h\n"
            "for i in range(40):\n"
            "    h.audit({'key': 'alice', 'status': 200, 'prompt_tokens': 1, 'completion_tokens': i})\n")
    env = {**os.environ, "FORKLIFT_GATEWAY_DIR": str(d), "FORKLIFT_GATEWAY_AUDIT_MAX_BYTES": "400",
           "PYTHONPATH": str(d)}
    res = subprocess.run([str(PYTHON), "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    names = sorted(p.name for p in d.glob("audit.jsonl*"))
    assert names == ["audit.jsonl", *(f"audit.jsonl.{i}" for i in range(1, 6))]
    assert all(p.stat().st_size <= 400 for p in d.glob("audit.jsonl*"))
    seen = [e["completion_tokens"] for e in gateway.audit_entries()]
    assert seen == sorted(seen) and seen[-1] == 39  # oldest first; the oldest beyond five files are gone
    assert gateway.usage()["alice"].requests == len(seen) < 40
