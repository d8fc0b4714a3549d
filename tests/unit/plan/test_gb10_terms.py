"""Non-weight terms that only appear off Hopper or on unified memory, derived from vLLM 0.26.0's code: the attention
backend per GPU and KV dtype, FlashInfer's workspace and per-graph decode wrappers in the CUDA-graph estimate,
FlashInfer's NVFP4 MoE on SM12x, and the host memory a unified GPU's free-memory readings count."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from forklift.model.load import spec_for
from forklift.plan import gb10, make, rules, terms
from forklift.plan.make import deployment_of
from tests.unit.plan.conftest import recipe_for

ROOT = Path(__file__).resolve().parents[3]
GLM47 = ROOT / "scripts" / "gpu" / "grid" / "models" / "glm47-6L.config.json"
GIB, MIB = 2**30, 2**20


def _glm47(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GLM47.read_text())
    return {**data, **extra}


def _spec(tmp_path: Path) -> Any:
    return spec_for(deployment_of(recipe_for(tmp_path, _glm47(), max_model_len=8192)).recipe.model).spec


@pytest.mark.parametrize(("capability", "kv", "backend"), [
    ("9.0", "auto", "fa3"), ("9.0", "fp8", "fa3"),          # Hopper: FA3 stores fp8 KV
    ("10.0", "auto", "flashinfer"),                          # SM10x: FLASHINFER first
    ("12.1", "auto", "fa2"), ("12.1", "fp8", "flashinfer"),  # FA2 has no fp8 KV
    ("8.0", "fp8_e4m3", "flashinfer"),
])
def test_attention_backend_by_gpu_and_kv_dtype(tmp_path: Path, capability: str, kv: str, backend: str) -> None:
    assert terms.attention_backend(_spec(tmp_path), capability, kv) == backend


def _gb10(tmp_path: Path, **serve: Any) -> Any:
    return make(recipe_for(tmp_path, _glm47(), hardware="gb10", nodes=2, tp=2, max_model_len=65536,
                           max_num_batched_tokens=8192, max_num_seqs=8, **serve))


def test_gb10_fp8_kv_graph_estimate_starts_with_the_flashinfer_workspace(tmp_path: Path) -> None:
    fp8 = _gb10(tmp_path, kv_cache_dtype="fp8")
    bf16 = _gb10(tmp_path)
    # FlashInferMetadataBuilder._get_workspace_buffer: max(394 MiB, 8192 tokens x 48 heads x 128 x 16 B) = 768 MiB,
    # allocated by the first FULL capture; FA2 (bf16 KV) has no such buffer
    workspace = max(394 * MIB, 8192 * (96 // 2) * 128 * 16)
    excess = gb10.terms_for(fp8.vllm_version).cudagraph_excess_gib  # the same in both: what MemFree adds on UMA
    assert fp8.ranks[0].cudagraph_gib * GIB >= workspace + excess * GIB
    assert bf16.ranks[0].cudagraph_gib - excess < 0.2
    assert fp8.ranks[0].kv_pool_gib < bf16.ranks[0].kv_pool_gib


def test_flashinfer_decode_wrappers_cost_more_per_graph_on_unified_memory(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    base = terms.Batch(tp=2, mnbt=8192, seqs=1024, max_model_len=32768, block=16, dtype_bytes=2,
                       tokens_to_experts=8192, expert_tp=2, capability="12.1", attention="flashinfer")
    vr = rules.rules_for("0.26.0")
    discrete, _ = terms.cudagraph_estimate(spec, vr, replace(base, unified=False))
    unified, graphs = terms.cudagraph_estimate(spec, vr, replace(base, unified=True))
    assert graphs == (51, 51)
    # each FULL graph's decode wrapper pins 8 MiB on the host besides its 8 MiB device workspace (first one too)
    assert unified - discrete >= 51 * 8 * MIB


def test_nvfp4_moe_on_sm12x_uses_flashinfer_cutlass_without_a_persistent_triton_workspace(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    triton = terms.Batch(tp=2, mnbt=8192, seqs=8, max_model_len=65536, block=16, dtype_bytes=2,
                         tokens_to_experts=8192, expert_tp=2, capability="12.1")
    fi = replace(triton, moe_backend="flashinfer_cutlass")
    # Triton: workspace13 + workspace2 = M x topk x (max(I, h) + max(2I, h)) bf16, kept by the WorkspaceManager
    assert terms.moe_workspace(spec, triton) == 8192 * 8 * (5120 + 5120) * 2
    # FlashInfer keeps only its (M, h) bf16 output there; its GEMM workspace is per call (~1.3 GiB here)
    assert terms.moe_workspace(spec, fi) == 8192 * 5120 * 2
    per_call = terms.flashinfer_moe_workspace(spec, fi)
    rows = 8192 * 8
    assert rows * 2 * 5120 * 2 <= per_call <= rows * 2 * 5120 * 2 * 1.1  # overlapped in/out buffers dominate


def test_unified_memory_counts_the_input_batch_token_table(tmp_path: Path) -> None:
    few = _gb10(tmp_path, kv_cache_dtype="fp8")
    many = make(recipe_for(tmp_path, _glm47(), hardware="gb10", nodes=2, tp=2, max_model_len=32768,
                           kv_cache_dtype="fp8"))
    h200 = make(recipe_for(tmp_path, _glm47(), hardware="h200", tp=2, max_model_len=32768, kv_cache_dtype="fp8"))
    assert many.max_num_seqs == 1024
    # InputBatch: max_num_seqs x max_model_len int32 token ids + bool mask on the CPU, built after the snapshot
    table = (1024 * 32768 * 5 - 8 * 65536 * 5) / GIB
    assert many.ranks[0].non_torch_gib - few.ranks[0].non_torch_gib == pytest.approx(table, abs=0.01)
    assert h200.ranks[0].non_torch_gib < many.ranks[0].non_torch_gib
