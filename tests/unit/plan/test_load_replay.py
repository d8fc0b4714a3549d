"""The load replay (forklift.plan.load_replay) against the H200 load probes and a hand-worked allocator case.

tests/data/calibration/h200-grid/load-probe holds scripts/gpu/grid/load_memory_probe.py's output (vLLM 0.26.0,
dummy weights): "took" (``consumed_bytes``, the growth of torch.cuda.memory_allocated over the load) and the bytes
of the storages the loaded model holds; r10-trace-*.json.gz its allocator trace (every alloc / free / segment event of
the load, PROBE_TRACE). Expected figures are read from those files at test time.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, cast

import pytest
from benchmarks import plan_accuracy as pa

from forklift.model.load import spec_from_file
from forklift.model.quant import loaded_scheme
from forklift.plan import make
from forklift.plan.allocator import Allocator, replay
from forklift.plan.load_replay import LOAD_MAX_SPLIT, load_slack

PROBES = Path(__file__).parents[2] / "data" / "calibration" / "h200-grid" / "load-probe"
GIB = 1 << 30
MIB = 1 << 20


def _probe(model: str, log: str = "r7-probe-{}.log") -> dict[str, Any]:
    text = (PROBES / log.format(model)).read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("PROBE "))
    return cast(dict[str, Any], json.loads(line[len("PROBE "):]))


R10 = {"llama8b-q-awq": "r10-{}-1-llama8b-q-awq", "qwen3-8b-q-awq": "r10-{}-2-qwen3-8b-q-awq",
       "llama8b-q-gptq": "r10-{}-3-llama8b-q-gptq"}


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


@pytest.mark.parametrize("model", ["llama8b-q-awq", "qwen3-8b-q-awq", "llama8b-q-gptq"])
@pytest.mark.parametrize("log", ["r7-probe-{}.log", "r10"])
def test_replayed_slack_is_the_measured_blocks_minus_storages(model: str, log: str) -> None:
    probe = _probe(model, R10[model].format("probe") + ".log" if log == "r10" else log)
    assert _slack(model) == probe["consumed_bytes"] - probe["model_storage_bytes"]


@pytest.mark.parametrize("model", sorted(R10))
def test_the_allocator_rules_reproduce_the_recorded_load_address_by_address(model: str) -> None:
    # every alloc of the recorded load lands where the real allocator put it (new segments at their recorded
    # addresses), and the allocated bytes at the end are the snapshot's
    with gzip.open(PROBES / (R10[model].format("trace") + ".json.gz"), "rt") as f:
        trace = json.load(f)
    a = Allocator(max_split_size=LOAD_MAX_SPLIT)
    a.seed(trace["before"])  # what the allocator held when the load began
    start = a.allocated
    segment_at, wrong = None, 0
    for action, addr, size, _stream, _frames in trace["events"]:
        if action == "segment_alloc":
            segment_at = addr
        elif action == "alloc":
            wrong += a.malloc(size, segment_at=segment_at) != addr
            segment_at = None
        elif action == "free_completed":
            a.free(addr)
        elif action == "segment_free":
            a.empty_cache()
    after = sum(b[0] for s in trace["segments"] for b in s["blocks"] if b[2] == "active_allocated")
    assert wrong == 0
    assert a.allocated == after
    assert after - start == _probe(model, R10[model].format("probe") + ".log")["consumed_bytes"]


def test_without_the_load_limit_the_awq_trace_is_not_reproduced() -> None:
    # the same events under PyTorch's default (no max_split_size) put blocks elsewhere
    with gzip.open(PROBES / (R10["llama8b-q-awq"].format("trace") + ".json.gz"), "rt") as f:
        trace = json.load(f)
    a, segment_at, wrong = Allocator(), None, 0
    a.seed(trace["before"])
    placed: dict[int, int] = {}
    for action, addr, size, _stream, _frames in trace["events"]:
        if action == "segment_alloc":
            segment_at = addr
        elif action == "alloc":
            placed[addr] = a.malloc(size, segment_at=segment_at)
            wrong += placed[addr] != addr
            segment_at = None
        elif action == "free_completed" and addr in placed:
            a.free(placed.pop(addr))
    assert wrong > 0


def test_not_covered_gives_no_term() -> None:
    assert _slack("llama8b-like") is None  # bf16: no repack
    assert _slack("llama8b-q-gptq-act") is None  # act-order: not replayed


@pytest.mark.parametrize("model", ["llama8b-q-awq", "qwen3-8b-q-awq"])
def test_awq_machete_planned_weights_are_what_loading_took(model: str, tmp_path: Path) -> None:
    probe = _probe(model)
    assert _plan_weights(model, tmp_path) == pytest.approx(probe["consumed_bytes"], abs=0.0005 * GIB)


def test_a_freed_block_over_the_split_limit_is_not_handed_to_a_smaller_request() -> None:
    # vLLM loads under max_split_size_mb:20. Two 8 MiB tensors share a new 20 MiB segment; once both are freed the
    # segment is one 20 MiB block, which a later 8 MiB request may not take (under the limit, block not): a new
    # segment. A 64 MiB request refuses a free 96 MiB block (at least 64 + 20 MiB) the same way.
    ops = [("alloc", "a", 8 * MIB), ("alloc", "b", 8 * MIB), ("free", "a", 0), ("free", "b", 0),
           ("alloc", "c", 8 * MIB), ("alloc", "big", 96 * MIB), ("free", "big", 0), ("alloc", "d", 64 * MIB)]
    limited = replay(ops, Allocator(max_split_size=20 * MIB))
    assert sorted(limited.segments.values()) == [20 * MIB, 20 * MIB, 64 * MIB, 96 * MIB]
    default = replay(ops)
    assert sorted(default.segments.values()) == [20 * MIB, 96 * MIB]
    assert default.slack == 0 and limited.slack == 0


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
