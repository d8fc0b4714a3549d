"""What a vLLM startup log says about memory: the weights / activation / non-torch / CUDA-graph split, the KV
pool and tokens, and vLLM's memory errors (``parse_log``). ``calibrate`` stores these terms; ``plan`` never needs
this module unless it calibrates.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

_NUM = r"(-?[0-9][0-9,]*\.?[0-9]*)"
_ACTUAL = re.compile(
    rf"Actual usage is {_NUM} GiB for weight, {_NUM} GiB for peak activation, {_NUM} GiB for non-torch memory, "
    rf"and {_NUM} GiB for CUDAGraph memory"
)
_DEBUG = re.compile(
    rf"torch peak memory increase: {_NUM}\s*GiB; non-torch forward increase memory: {_NUM}\s*GiB; "
    rf"weights memory: {_NUM}\s*GiB"
)
_WORKER = re.compile(r"\((?:Worker_)?(?:PP(\d+))?(?:_?TP(\d+))?[^)]*\)")
_ESTIMATED = re.compile(rf"Estimated CUDA graph memory: {_NUM} GiB")
_LOADING = re.compile(rf"Model loading took {_NUM} GiB")
_AVAILABLE = re.compile(rf"Available KV cache memory: {_NUM} GiB")
_KV_TOKENS = re.compile(rf"(?:GPU|CPU) KV cache size: {_NUM} tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for {_NUM} tokens per request: {_NUM}x")
_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens|Setting kv cache block size to (\d+)")
_PADDING = re.compile(rf"Padding mamba page size by {_NUM}%")
_GRAPHS = re.compile(r"Profiling CUDA graph memory: PIECEWISE=(\d+).*?FULL=(\d+)")
_NEED = re.compile(rf"max seq len \({_NUM}\), \({_NUM} GiB KV cache is needed.*?available KV cache memory "
                   rf"\({_NUM} GiB\).*?estimated maximum model length is {_NUM}")
_NO_MEMORY = re.compile(r"No available memory for the cache blocks")
_FREE_ERROR = re.compile(rf"Free memory on device \({_NUM}/{_NUM} GiB\) on startup is less than desired")
_MAMBA_BLOCKS = re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")
_RUNNER = re.compile(r"Using V2 Model Runner")
_CPU_KV = re.compile(rf"Explicitly set \({_NUM}/{_NUM}\) GiB for KV cache")
_DESIRED = re.compile(rf"Free memory on device \({_NUM}/{_NUM} GiB\) on startup\. Desired GPU memory utilization is "
                      rf"\({_NUM}, {_NUM} GiB\)")
_CAPTURED = re.compile(rf"Graph capturing finished in {_NUM} secs?, took {_NUM} GiB")
_VERSION = re.compile(r"version (\d+\.\d+\.\d+\S*)")
_ARGS = re.compile(r"non-default args: (\{.*\})")
_COMPILE_WARM = re.compile(r"Directly load AOT compilation|Directly load the compiled graph")
_COMPILE_COLD = re.compile(r"Compiling a graph for compile range|torch\.compile and initial profiling")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


class LogFacts(BaseModel):
    """What one vLLM startup log says about memory (None where the log is silent)."""

    model_config = ConfigDict(frozen=True)

    vllm_version: str | None = None
    settings: dict[str, Any] = {}
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_actual_gib: float | None = None
    cudagraph_estimate_gib: float | None = None
    available_kv_gib: float | None = None
    kv_tokens: int | None = None
    concurrency: float | None = None
    block_size: int | None = None
    mamba_padding_pct: float | None = None
    graphs: tuple[int, int] | None = None
    runner: str = "v1"
    error: str | None = None
    """vLLM's startup error about memory (KV does not fit, no memory for blocks, free memory, more sequences than a
    hybrid's Mamba cache blocks), if it stopped."""
    needed_kv_gib: float | None = None
    max_len_estimate: int | None = None
    per_stage_activation: dict[int, float] = {}
    cpu_kv_gib: float | None = None
    """vLLM-CPU: the KV space it set (VLLM_CPU_KVCACHE_SPACE), from 'Explicitly set (N/M) GiB for KV cache'."""
    memory_total_gib: float | None = None
    """The device's total memory as vLLM read it (GPU: cudaMemGetInfo's total; CPU: the node's memory)."""
    requested_gib: float | None = None
    """GPU: utilization x total, the memory vLLM asked for ('Desired GPU memory utilization is (U, N GiB)')."""
    graph_capture_gib: float | None = None
    """'Graph capturing finished in N secs, took M GiB': CUDA-graph capture is done."""
    compile_cache: str | None = None
    """'warm' when vLLM loaded the compiled model from torch.compile's cache, 'cold' when it compiled; None: silent."""

    @property
    def fits(self) -> bool | None:
        """Whether vLLM started (sized its KV cache without a memory error); None when the log says neither."""
        if self.error is not None:
            return False
        return True if self.kv_tokens is not None else None


def _memory_lines(line: str, data: dict[str, Any]) -> None:
    if m := _ACTUAL.search(line):
        data["weights_gib"] = _f(m.group(1))
        act = _f(m.group(2))
        data["activation_gib"] = max(act, data.get("activation_gib", 0.0))
        data["non_torch_gib"] = max(_f(m.group(3)), data.get("non_torch_gib", 0.0))
        data["cudagraph_actual_gib"] = _f(m.group(4))
        w = _WORKER.search(line)
        stage = int(w.group(1)) if w and w.group(1) else 0
        data["per_stage_activation"][stage] = act
    elif m := _DEBUG.search(line):
        data.setdefault("activation_gib", _f(m.group(1)))
        data.setdefault("non_torch_gib", _f(m.group(2)))
        data.setdefault("weights_gib", _f(m.group(3)))
    if m := _ESTIMATED.search(line):
        data["cudagraph_estimate_gib"] = _f(m.group(1))
    if (m := _LOADING.search(line)) and "weights_gib" not in data:
        data["weights_gib"] = _f(m.group(1))
    if m := _AVAILABLE.search(line):  # every worker logs its own; vLLM takes the smallest
        data["available_kv_gib"] = min(_f(m.group(1)), data.get("available_kv_gib", float("inf")))


def _kv_lines(line: str, data: dict[str, Any]) -> None:
    if m := _KV_TOKENS.search(line):
        data["kv_tokens"] = int(_f(m.group(1)))
    if m := _CONCURRENCY.search(line):
        data["concurrency"] = _f(m.group(2))
    if m := _BLOCK.search(line):
        data["block_size"] = int(m.group(1) or m.group(2))
    if m := _PADDING.search(line):
        data["mamba_padding_pct"] = _f(m.group(1))
    if m := _GRAPHS.search(line):
        data["graphs"] = (int(m.group(1)), int(m.group(2)))
    if _RUNNER.search(line):
        data["runner"] = "v2"
    if m := _CPU_KV.search(line):
        data["cpu_kv_gib"] = _f(m.group(1))
        data["memory_total_gib"] = _f(m.group(2))
    if m := _DESIRED.search(line):
        data["memory_total_gib"] = _f(m.group(2))
        data["requested_gib"] = _f(m.group(4))
    if m := _CAPTURED.search(line):
        data["graph_capture_gib"] = max(_f(m.group(2)), data.get("graph_capture_gib", 0.0))
    if (m := _NEED.search(line)) and "error" not in data:
        data["error"] = "kv"
        data["needed_kv_gib"] = _f(m.group(2))
        data["available_kv_gib"] = _f(m.group(3))
        data["max_len_estimate"] = int(_f(m.group(4)))
    elif _NO_MEMORY.search(line) and "error" not in data:
        data["error"] = "no_memory"
    elif _FREE_ERROR.search(line) and "error" not in data:
        data["error"] = "free_memory"
    elif _MAMBA_BLOCKS.search(line) and "error" not in data:
        data["error"] = "mamba_blocks"  # sized the pool, then refused FULL graphs for more sequences than blocks


def parse_log(text: str) -> LogFacts:
    """Pull the sizing lines out of a vLLM startup log (INFO lines; DEBUG split when present)."""
    data: dict[str, Any] = {"per_stage_activation": {}}
    for line in text.splitlines():
        if (m := _VERSION.search(line)) and "vllm_version" not in data:
            data["vllm_version"] = m.group(1)
        if (m := _ARGS.search(line)) and "settings" not in data:
            try:
                parsed = ast.literal_eval(m.group(1))
                if isinstance(parsed, dict):
                    data["settings"] = {str(k): v for k, v in parsed.items()}
            except (ValueError, SyntaxError):
                pass
        _memory_lines(line, data)
        _kv_lines(line, data)
        if "compile_cache" not in data:
            if _COMPILE_WARM.search(line):
                data["compile_cache"] = "warm"
            elif _COMPILE_COLD.search(line):
                data["compile_cache"] = "cold"
    return LogFacts(**data)
