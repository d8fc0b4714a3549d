"""Gemma-3's full + sliding-window KV groups through vLLM 0.26's hybrid KV cache manager (kv_cache_utils.py
_get_kv_cache_groups_uniform_page_size; SlidingWindowSpec.max_memory_usage_bytes), derived from the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.plan import make
from tests.unit.plan.conftest import CONFIGS, cdiv, recipe_for

GEMMA3 = CONFIGS / "gemma-3-27b-it.json"


@pytest.mark.parametrize("tp", [1, 2])
def test_gemma3_groups_and_tokens_follow_the_hybrid_manager(tmp_path: Path, tp: int) -> None:
    length = 32768
    plan = make(recipe_for(tmp_path, GEMMA3, hardware="h200", tp=tp, max_model_len=length))
    assert plan.block_size == 16
    heads = 16 // tp
    page = 16 * 2 * heads * 128 * 2  # one layer's page: block x K+V x heads x head_dim x bf16
    # 52 sliding and 10 full layers: the group size is the smaller count (52 >= 1.5 x 10), so 6 sliding groups
    # (8 padding layers) and 1 full group share one block table of 10-layer pages
    rank = plan.ranks[0]
    assert plan.num_blocks == int(rank.kv_pool_gib * 2**30) // (page * 10) or \
        abs(plan.num_blocks - int(rank.kv_pool_gib * 2**30) // (page * 10)) <= 1
    # a request: all of its blocks in the full group, the window (1023) + two batches of 8192 in flight + 1 block
    # in each sliding group
    per_request = 6 * (cdiv(min(1023 + 2 * 8192, length), 16) + 1) + 1 * (length // 16)
    assert plan.max_concurrency == pytest.approx(plan.num_blocks / per_request, abs=0.01)
    assert plan.kv_tokens == int(plan.num_blocks / per_request * length)
    assert rank.kv_bytes_per_token == 62 * 2 * heads * 128 * 2


def test_gemma3_vision_tower_and_its_profile_pass_are_in_the_notes(tmp_path: Path) -> None:
    """SigLIP: 256 tokens per image (mm_tokens_per_image); the encoder budget max(8,192, 256) holds 32 of them."""
    plan = make(recipe_for(tmp_path, GEMMA3, hardware="h200", max_model_len=8192))
    assert any("vision tower (siglip" in n for n in plan.notes)
    assert any("32 dummy image(s) of 256 tokens" in n for n in plan.notes)
