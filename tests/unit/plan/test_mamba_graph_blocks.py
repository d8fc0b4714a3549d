"""vLLM 0.20+ refuses FULL decode graphs for a hybrid with more sequences than Mamba cache blocks
(config/compilation.py resolve_cudagraph_mode_and_sizes); 0.18-0.19 drop the larger capture sizes instead
(adjust_cudagraph_sizes_for_mamba_cache), and eager mode captures nothing. The H200 point p32 (Nemotron-H at
utilization 0.05, held out) is where the rule showed: vLLM sized the pool and stopped with this error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import plan_accuracy as pa

from forklift.plan import make
from forklift.plan.startlog import parse_log

REPO = Path(__file__).resolve().parents[3]


def _point(pid: str, **serve: Any) -> dict[str, Any]:
    points = json.loads((REPO / "scripts" / "gpu" / "grid" / "points.json").read_text())["points"]
    point = next(p for p in points if p["id"] == pid)
    return {**point, "serve": {**point["serve"], **serve}}


def test_the_log_of_p32_is_the_refusal_and_the_plan_says_it(tmp_path: Path) -> None:
    facts = parse_log((pa.DATA / "h200-grid" / "p32-nemotronh-14L.log").read_text(errors="replace"))
    assert facts.error == "mamba_blocks" and facts.fits is False
    plan = make(pa.recipe_for(_point("p32"), tmp_path), vllm_version="0.26.0")
    assert not plan.fits and plan.error and "Mamba cache blocks" in plan.error
    assert plan.max_num_seqs > plan.num_blocks
    assert f"at most {plan.num_blocks}" in plan.error


def test_fewer_sequences_eager_mode_or_an_older_release_start(tmp_path: Path) -> None:
    for sub in "abcd":
        (tmp_path / sub).mkdir()
    base = make(pa.recipe_for(_point("p32"), tmp_path / "a"), vllm_version="0.26.0")
    few = make(pa.recipe_for(_point("p32", max_num_seqs=base.num_blocks), tmp_path / "b"), vllm_version="0.26.0")
    eager = make(pa.recipe_for(_point("p32", enforce_eager=True), tmp_path / "c"), vllm_version="0.26.0")
    older = make(pa.recipe_for(_point("p32"), tmp_path / "d"), vllm_version="0.19.0")
    assert few.fits and eager.fits and older.fits


def test_a_dense_model_has_no_such_limit(tmp_path: Path) -> None:
    plan = make(pa.recipe_for(_point("p20", max_num_seqs=4096), tmp_path), vllm_version="0.26.0")
    assert plan.num_blocks < 4096 and plan.fits
