"""KV tokens predicted from config + settings alone, against every H200 run in tests/data/calibration.

The settings below are the runs' inputs (their non-default args); the expected token counts are read
from the logs at test time. Tolerance: 1%.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from forklift.plan import make
from tests.helpers import CALIBRATION
from tests.unit.plan.conftest import recipe_for

CAL = CALIBRATION
LLAMA = CAL / "llama8b-like.config.json"
GLM = CAL / "glm45air-16L-like.config.json"

RUNS: dict[str, tuple[Path, dict[str, Any]]] = {
    "h200-llama8b-bf16-kvbf16.log": (LLAMA, {"max_model_len": 8192, "gpu_memory_utilization": 0.9}),
    "h200-llama8b-bf16-kvfp8-batch2048-seqs8.log": (LLAMA, {
        "max_model_len": 8192, "gpu_memory_utilization": 0.9, "kv_cache_dtype": "fp8",
        "max_num_batched_tokens": 2048, "max_num_seqs": 8}),
    "h200-llama8b-fp8.log": (LLAMA, {"max_model_len": 8192, "gpu_memory_utilization": 0.9, "quantization": "fp8"}),
    "h200-glm45air16L-bf16.log": (GLM, {"max_model_len": 16384, "gpu_memory_utilization": 0.9}),
    "h200x2-llama8b-tp2-native-rank0.log": (LLAMA, {"max_model_len": 8192, "gpu_memory_utilization": 0.85,
                                                    "_tp": 2}),
    "h200x2-llama8b-pp2-native-rank0.log": (LLAMA, {"max_model_len": 8192, "gpu_memory_utilization": 0.85,
                                                    "_pp": 2}),
}


def _logged(log: Path) -> tuple[int, str]:
    text = log.read_text(errors="replace")
    tokens = re.findall(r"GPU KV cache size: ([0-9,]+) tokens", text)
    version = re.search(r"version (\d+\.\d+\.\d+)", text)
    assert tokens and version, f"{log.name}: no KV size or version line"
    return int(tokens[-1].replace(",", "")), version.group(1)


def test_every_h200_log_is_covered() -> None:
    logs = {p.name for p in CAL.glob("h200*.log") if "rank1" not in p.name}
    assert logs == set(RUNS)


@pytest.mark.parametrize("log_name", sorted(RUNS))
def test_kv_tokens_within_one_percent(log_name: str, tmp_path: Path) -> None:
    config, settings = RUNS[log_name]
    settings = dict(settings)
    tp, pp = settings.pop("_tp", 1), settings.pop("_pp", 1)
    nodes = tp * pp
    recipe = recipe_for(tmp_path, config, hardware="h200", nodes=nodes, tp=tp, pp=pp, **settings)
    expected, version = _logged(CAL / log_name)
    plan = make(recipe, vllm_version=version)
    assert plan.fits
    assert abs(plan.kv_tokens - expected) / expected < 0.01, f"planned {plan.kv_tokens}, vLLM logged {expected}"
