"""Startup phases read from a vLLM log, and the lines worth showing when a start fails."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# Order matters: a later phase means the earlier ones are done.
PHASES: list[tuple[str, re.Pattern[str]]] = [
    ("starting", re.compile(r"non-default args|Initializing a V1 LLM engine|vLLM API server version")),
    ("loading weights", re.compile(
        r"Starting to load model|Loading model from scratch|Loading safetensors checkpoint|Loading weights|"
        r"Model loading took")),
    ("compiling", re.compile(r"Warming up model|torch\.compile|Capturing CUDA graph|Compiling a graph|profiling")),
    ("sizing KV cache", re.compile(r"KV cache size:|Available KV cache memory|Maximum concurrency")),
    ("serving", re.compile(r"Starting vLLM server on|Application startup complete")),
]
PHASE_NAMES = [name for name, _ in PHASES] + ["ready"]

_ERROR_RE = re.compile(
    r"Error|Exception|Traceback|error:|FAILED|failed|Killed|out of memory|OOM|ValueError|RuntimeError",
)
_NOISE_RE = re.compile(r"Triton is installed|DeprecationWarning|warnings\.warn|FutureWarning|LD_PRELOAD")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def clean(line: str) -> str:
    """Strip ANSI colour codes and carriage-return progress redraws."""
    line = _ANSI_RE.sub("", line)
    if "\r" in line:
        line = line.rstrip("\r").split("\r")[-1]
    return line.rstrip()


def phase_of(line: str) -> str | None:
    """The latest phase a log line proves, or None."""
    found = None
    for name, pattern in PHASES:
        if pattern.search(line):
            found = name
    return found


def advance(current: str, lines: Iterable[str]) -> str:
    """The furthest phase reached after reading lines, never going back."""
    idx = PHASE_NAMES.index(current)
    for line in lines:
        ph = phase_of(line)
        if ph is not None:
            idx = max(idx, PHASE_NAMES.index(ph))
    return PHASE_NAMES[idx]


_EXC_LINE_RE = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::\s|:?$)")
_WRAPPER_RE = re.compile(
    r"Engine core initialization failed|See root cause above|EngineDeadError|WorkerProc initialization failed|"
    r"Worker failed|Process .* died|Engine process failed to start"
)


def _blocks(cleaned: Sequence[str]) -> list[tuple[int, int]]:
    starts = [i for i, x in enumerate(cleaned) if "Traceback (most recent call last)" in x]
    return [(s, starts[k + 1] if k + 1 < len(starts) else len(cleaned)) for k, s in enumerate(starts)]


def _exception_line(block: Sequence[str]) -> str | None:
    for line in reversed(block):
        if _EXC_LINE_RE.search(line):
            return line
    return None


def relevant_tail(lines: Sequence[str], n: int = 15) -> list[str]:
    """The lines that explain a failure: the root-cause traceback (not the API server's generic
    "Engine core initialization failed" wrapper that follows it), else from the first error on."""
    cleaned = [clean(x) for x in lines if clean(x) and not _NOISE_RE.search(x)]
    blocks = _blocks(cleaned)
    if blocks:
        chosen = blocks[-1]
        for b in blocks:
            exc = _exception_line(cleaned[b[0]:b[1]])
            if exc is not None and not _WRAPPER_RE.search(exc):
                chosen = b
                break
        block = cleaned[chosen[0]:chosen[1]]
        exc = _exception_line(block)
        if exc is not None:
            block = block[: block.index(exc) + 1]
        tail = block[-n:]
        final = _exception_line(cleaned[blocks[-1][0]:])
        if final is not None and final not in tail:
            tail.append(final)
        return tail
    start = next((i for i, line in enumerate(cleaned) if _ERROR_RE.search(line)), None)
    picked = cleaned[start:] if start is not None else cleaned
    return picked[-n:]


# The recipe key most likely to fix a failed start: (pattern over the log, key, advice).
STARTUP_HINTS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"\[forklift-patch\] ERROR"), "patches",  # forklift-patches: first, its lines name vLLM files
     "drop or fix the patch named above (`forklift patch check --against vllm==VERSION`), or allow a nightly "
     "build with {id: ID, any_version: true, because: WHY}"),
    (re.compile(r"max seq len|max_model_len|estimated maximum model length", re.I), "serve.max_model_len",
     "lower serve.max_model_len, or give the KV cache more memory"),
    (re.compile(r"KV cache|cache blocks|VLLM_CPU_KVCACHE_SPACE", re.I), "serve.cpu_kv_cache_gib",
     "give the KV cache more memory (serve.gpu_memory_utilization on GPUs, serve.cpu_kv_cache_gib on CPU)"),
    (re.compile(r"Free memory on device .* less than desired GPU memory utilization", re.I),
     "serve.gpu_memory_utilization", "lower serve.gpu_memory_utilization or free the GPU"),
    (re.compile(r"out of memory|OutOfMemory|CUDA error: out of memory", re.I), "serve.gpu_memory_utilization",
     "lower serve.gpu_memory_utilization / serve.max_num_batched_tokens, or set serve.enforce_eager"),
    (re.compile(r"Address already in use|address in use|bind", re.I), "serve.port",
     "choose another serve.port (or network.master_port for multi-node)"),
    (re.compile(r"No such file|does not appear to have a file|not a valid model|config\.json", re.I),
     "model.source", "point model.source at a directory with config.json and the weights"),
    (re.compile(r"tool.call.parser|tool_parser", re.I), "serve.tool_call_parser", "use a supported parser"),
    (re.compile(r"reasoning.parser", re.I), "serve.reasoning_parser", "use a supported reasoning parser"),
    (re.compile(r"quantiz", re.I), "serve.quantization", "match serve.quantization to the checkpoint"),
    (re.compile(r"unrecognized arguments|invalid choice|error: argument", re.I), "serve.extra_args",
     "remove or fix the raw arguments in serve.extra_args"),
]


def startup_hint(lines: Sequence[str]) -> tuple[str, str] | None:
    text = "\n".join(lines)
    for pattern, key, advice in STARTUP_HINTS:
        if pattern.search(text):
            return key, advice
    return None
