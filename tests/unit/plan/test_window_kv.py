"""A model whose every layer slides (Phi-3-mini-4k: no layer_types, the config's sliding_window becomes vLLM's
CacheConfig.sliding_window): one uniform KV group of SlidingWindowSpec layers (kv_cache_utils.py
UniformTypeKVCacheSpecs; SlidingWindowSpec.max_memory_usage_bytes), derived from the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.plan import make
from tests.unit.plan.conftest import CONFIGS, cdiv, recipe_for

PHI3 = CONFIGS / "phi-3-mini-4k-instruct.json"


@pytest.mark.parametrize("mnbt", [512, 2048])
def test_phi3_requests_hold_the_window_not_the_context(tmp_path: Path, mnbt: int) -> None:
    length = 4096
    plan = make(recipe_for(tmp_path, PHI3, hardware="h200", max_model_len=length, max_num_batched_tokens=mnbt))
    rank = plan.ranks[0]
    assert plan.block_size == 16
    assert rank.kv_bytes_per_token == 32 * 2 * 32 * 96 * 2  # layers x K+V x heads x head_dim x bf16
    page = 16 * 32 * 2 * 32 * 96 * 2  # one block of every layer (one group)
    assert abs(plan.num_blocks - int(rank.kv_pool_gib * 2**30) // page) <= 1
    # window 2047: 2046 earlier tokens + two batches in flight, capped at the request, plus one block
    per_request = cdiv(min(2047 - 1 + 2 * mnbt, length), 16) + 1
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / per_request, abs=0.01)
    assert plan.kv_tokens == int(plan.num_blocks / per_request * length)
