from __future__ import annotations

from pathlib import Path

import pytest

from forklift import bench
from forklift.canary.candidate import fits_beside, runtime_changed
from forklift.canary.measure import DEFAULT_WORKLOAD, config_from
from forklift.errors import BenchError
from forklift.plan import Plan, for_launch
from forklift.recipe import load, resolve


def _plan(ref: str, *sets: str) -> Plan:
    plan = for_launch(resolve(ref, list(sets)), force=True)
    assert isinstance(plan, Plan)
    return plan


def test_two_gpu_deployments_fit_beside_only_when_their_claims_do() -> None:
    full = _plan("glm-4.7-nvfp4-2x-spark")
    fits, why = fits_beside(full, full)
    assert not fits and "spark-1 device 0" in why and "98% of 121.7 GiB" in why
    small = _plan("default", "serve.cpu_kv_cache_gib=1")
    assert fits_beside(small, small) == (True, "both fit by the plans")
    big = _plan("default", "serve.cpu_kv_cache_gib=12")
    fits, why = fits_beside(small, big)
    assert not fits and why.startswith("both do not fit: localhost:")


def test_a_candidate_that_does_not_fit_alone_never_fits_beside() -> None:
    full = _plan("glm-4.7-nvfp4-2x-spark")
    half = _plan("glm-4.7-nvfp4-2x-spark", "serve.gpu_memory_utilization=0.45")
    assert not half.fits
    fits, why = fits_beside(full, half)
    assert not fits and "does not fit on its own" in why


def test_runtime_changes_are_what_trigger_the_patch_check() -> None:
    base = load("default")
    assert runtime_changed(base, load("default", ["runtime.python=/opt/v/bin/python"]))
    assert not runtime_changed(base, load("default", ["serve.max_num_seqs=1"]))


def test_saved_settings_repeat_the_same_workload(tmp_path: Path) -> None:
    original = bench.BenchConfig(concurrency=(1, 4), input_len=100, output_len=20, requests=7, warmup=0, seed=3,
                                 slo=bench.Slo(ttft_ms=500.0), prompts_file=tmp_path / "p.jsonl")
    assert config_from(original.to_json()) == original
    assert config_from(dict(DEFAULT_WORKLOAD)).concurrency == (4,)
    with pytest.raises(BenchError):
        config_from({"concurrency": [0]})
