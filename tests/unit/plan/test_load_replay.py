"""The load replay (forklift.plan.load_replay) against the H200 load probes and a hand-worked allocator case.

tests/data/calibration/h200-grid/load-probe holds scripts/gpu/grid/load_memory_probe.py's output (vLLM 0.26.0,
dummy weights): "took" (``consumed_bytes``, the growth of torch.cuda.memory_allocated over the load) and the bytes
of the storages the loaded model holds. Expected figures are read from those logs at test time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from benchmarks import plan_accuracy as pa

from forklift.model.load import spec_from_file
from forklift.model.quant import loaded_scheme
from forklift.plan import make
from forklift.plan.allocator import replay
from forklift.plan.load_replay import load_slack

PROBES = Path(__file__).parents[2] / "data" / "calibration" / "h200-grid" / "load-probe"
GIB = 1 << 30
MIB = 1 << 20


def _probe(model: str) -> dict[str, Any]:
    line = next(ln for ln in (PROBES / f"r7-probe-{model}.log").read_text().splitlines() if ln.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


def _plan_weights(model: str, tmp_path: Path) -> float:
    plan = make(pa.recipe_for({"id": model, "model": model, "serve": {"max_model_len": 2048}}, tmp_path),
                vllm_version="0.26.0")
    return plan.ranks[0].weights_gib * GIB


def test_gptq_machete_planned_weights_are_what_loading_took(tmp_path: Path) -> None:
    probe = _probe("llama8b-q-gptq")
    # weights_gib carries three decimals; the allocator's slack here is 8.45 MB = 0.0079 GiB
    assert _plan_weights("llama8b-q-gptq", tmp_path) == pytest.approx(probe["consumed_bytes"], abs=0.0005 * GIB)


def _slack(model: str) -> int | None:
    spec = spec_from_file(pa.config_path(model))
    return load_slack(spec, loaded_scheme(spec.quant, dummy=True), tp=1, capability="9.0", start=0,
                      end=spec.num_layers, first=True, last=True, act_bytes=2)


def test_gptq_machete_replayed_slack_is_the_measured_blocks_minus_storages() -> None:
    probe = _probe("llama8b-q-gptq")
    assert _slack("llama8b-q-gptq") == probe["consumed_bytes"] - probe["model_storage_bytes"]


@pytest.mark.parametrize("model", ["llama8b-q-awq", "qwen3-8b-q-awq"])
def test_awq_replayed_slack_is_a_lower_bound(model: str) -> None:
    probe = _probe(model)
    slack = _slack(model)
    assert slack is not None and 0 < slack < probe["consumed_bytes"] - probe["model_storage_bytes"]


def test_not_covered_gives_no_term() -> None:
    assert _slack("llama8b-like") is None  # bf16: no repack
    assert _slack("llama8b-q-gptq-act") is None  # act-order: not replayed


@pytest.mark.parametrize("model", ["llama8b-q-awq", "qwen3-8b-q-awq"])
def test_awq_planned_weights_lie_between_the_storages_and_what_loading_took(model: str, tmp_path: Path) -> None:
    # AWQ's conversion transients are not replayed: the plan counts the blocks of the tensors that survive it, a
    # lower bound of the slack
    probe = _probe(model)
    planned = _plan_weights(model, tmp_path)
    assert probe["model_storage_bytes"] + 0.005 * GIB < planned < probe["consumed_bytes"]


def test_unsplit_blocks_alternate_between_layers_as_gptq_loads() -> None:
    # Per layer at init: o_proj's 8 MiB qweight, then gate_up's 1.75 MiB scales (the 12 MiB / 56 MiB / 28 MiB
    # qweights take segments of their own). Layer 0: a new 20 MiB segment, 8 MiB out, 12 MiB left; the scales
    # split it (10.25 MiB left). Layer 1: o_proj splits that (2.25 MiB left); the scales take the 2.25 MiB block
    # whole, as 0.5 MiB is not more than kSmallSize. Layer 2 starts a new segment: 0.5 MiB every other layer.
    ops = []
    for layer in range(4):
        ops += [("alloc", ("o", layer), 8 * MIB), ("alloc", ("s", layer), 7 * MIB // 4)]
    a = replay(ops)
    assert a.slack == 2 * (MIB // 2)
    assert len(a.segments) == 2
