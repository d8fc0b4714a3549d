"""The planned weights against what vLLM 0.26's model holds after loading on the H200, storage by storage.

tests/data/calibration/h200-grid/load-probe holds the output of scripts/gpu/grid/load_memory_probe.py (vLLM 0.26.0,
dummy weights): the bytes of every storage the loaded model reaches (parameters and buffers: the Machete kernel's
prepacked values, scales and scale-multiplied zero points, the rotary cos/sin cache), and what "Model loading took"
measures (the caching allocator's allocated bytes). Expected figures are read from those logs at test time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from benchmarks import plan_accuracy as pa

from forklift.model.load import spec_from_file
from forklift.model.quant import loaded_scheme
from forklift.plan import make
from forklift.plan.load_replay import load_slack

PROBES = Path(__file__).parents[2] / "data" / "calibration" / "h200-grid" / "load-probe"
GIB = 1 << 30


def _probe(model: str) -> dict[str, Any]:
    line = next(ln for ln in (PROBES / f"r7-probe-{model}.log").read_text().splitlines() if ln.startswith("PROBE "))
    return cast(dict[str, Any], json.loads(line[len("PROBE "):]))


@pytest.mark.parametrize("model", ["llama8b-like", "llama8b-q-awq", "llama8b-q-gptq", "qwen3-8b-q-awq"])
def test_planned_weights_are_the_storages_the_loaded_model_holds(model: str, tmp_path: Path) -> None:
    probe = _probe(model)
    plan = make(pa.recipe_for({"id": model, "model": model, "serve": {"max_model_len": 2048}}, tmp_path),
                vllm_version="0.26.0")
    # weights_gib carries three decimals: 0.001 GiB; the rotary cache alone is 0.008-0.010 GiB here. The plan also
    # holds the caching allocator's slack where plan/load_replay.py covers the method (test_load_replay.py)
    spec = spec_from_file(pa.config_path(model))
    slack = load_slack(spec, loaded_scheme(spec.quant, dummy=True), tp=1, capability="9.0", start=0,
                       end=spec.num_layers, first=True, last=True, act_bytes=2) or 0
    assert plan.ranks[0].weights_gib * GIB - slack == pytest.approx(probe["model_storage_bytes"], abs=0.001 * GIB)
    # the rotary cache is one of those storages (one [max_position, head_dim] bf16 cache per model)
    cfg = json.loads(pa.config_path(model).read_text())
    assert probe["by_name"]["cos_sin_cache:torch.bfloat16"] == cfg["max_position_embeddings"] * cfg["head_dim"] * 2
