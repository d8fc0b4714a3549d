"""DeepSeek-V4 config.json values the planner cannot read end as a ModelError naming the key and the fix, never a
Python traceback; `forklift plan` run as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import forklift

FLASH = json.loads((Path(__file__).resolve().parents[2] / "data" / "configs" / "deepseek-v4-flash.json").read_text())


def _plan(tmp: Path, cfg: dict[str, Any], *args: str, version: str = "0.32.0") -> Any:
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(cfg))
    recipe = tmp / "recipe.yaml"
    recipe.write_text(f"model: {{source: {model}, load_format: dummy}}\nnodes: [{{host: a, hardware: h200}}]\n"
                      "serve: {max_model_len: 4096}\n")
    return forklift("plan", str(recipe), "--vllm-version", version, *args, home=tmp / "home")


def _ratios(i: int, value: Any) -> dict[str, Any]:
    ratios = list(FLASH["compress_ratios"])
    ratios[i] = value
    return {**FLASH, "compress_ratios": ratios}


@pytest.mark.parametrize(("cfg", "key"), [
    (_ratios(3, None), "compress_ratios[3]"),
    (_ratios(2, "a"), "compress_ratios[2]"),
    ({**FLASH, "num_hash_layers": "x"}, "num_hash_layers"),
    ({**FLASH, "rope_scaling": "yarn"}, "rope_scaling"),
])
def test_a_bad_value_names_its_key_without_a_traceback(tmp_path: Path, cfg: dict[str, Any], key: str) -> None:
    res = _plan(tmp_path, cfg)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr, res.stderr
    assert "ModelError" in res.stderr and f"'{key}'" in res.stderr and "fix:" in res.stderr


def test_the_published_config_plans(tmp_path: Path) -> None:
    res = _plan(tmp_path, FLASH, "--json")
    assert "Traceback" not in res.stderr, res.stderr
    assert json.loads(res.stdout)["ranks"]


def test_a_vllm_release_before_deepseek_v4_is_refused_naming_it(tmp_path: Path) -> None:
    res = _plan(tmp_path, FLASH, version="0.14.0")
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert "vLLM 0.14.0 does not serve DeepseekV4ForCausalLM (first in 0.20.0)" in res.stderr
