"""Candidates pruned by the plan (the real planner on the bundled default, no processes) and --apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.errors import TuneError
from forklift.recipe.deployment import resolve
from forklift.tune import apply, space
from forklift.tune.slo import parse
from forklift.tune.workloads import synthetic

SLO = parse("ttft_p95=3000,tpot_p95=100")


def test_default_recipe_candidates_are_local_and_fit() -> None:
    d = resolve("default")
    sp = space.build(d, synthetic("rag", size=0.5), SLO, max_candidates=4)
    assert sp.candidates[0].is_baseline and len(sp.candidates) == 5
    for c in sp.candidates[1:]:
        assert 1 <= len(c.sets) <= 2 and c.plan_facts["fits"]
        assert all(s.startswith("serve.") for s in c.sets)
    pruned = dict(sp.pruned)
    # 8 users against vLLM-CPU's default 128 sequences: max_num_seqs >= 8 changes nothing
    assert any("same as the baseline" in why for why in pruned.values())
    assert any("fp8 KV is not offered" in n for n in sp.notes)  # vLLM-CPU
    assert not any("kv_cache_dtype" in s for c in sp.candidates for s in c.sets)


def test_plan_refusal_prunes_with_the_reason() -> None:
    from forklift.plan import for_launch

    calls: list[list[str]] = []

    def plan_fn(dep):  # type: ignore[no-untyped-def]
        calls.append(dep.overrides)
        if any("max_num_batched_tokens=256" in s for s in dep.overrides):
            from forklift.errors import PlanError

            raise PlanError("too small a chunk", fix="bigger")
        return for_launch(dep)

    sp = space.build(resolve("default"), synthetic("chat"), SLO, plan_fn=plan_fn, max_candidates=20)
    refused = [s for s, why in sp.pruned if "the planner refuses it: too small a chunk" in why]
    assert refused and all("max_num_batched_tokens=256" in s for s in refused)
    assert not any("max_num_batched_tokens=256" in s for c in sp.candidates for s in c.sets)


def test_apply_keeps_comments_and_writes_evidence(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text("description: mine  # keep me\nmodel:\n  source: bundled:smollm2-135m-instruct\n"
                      "nodes:\n  - host: localhost\n    hardware: cpu\nserve:\n  port: 8000  # the port\n"
                      "  max_model_len: 4096\n")
    change = apply.plan(recipe, ["serve.max_num_seqs=4", "serve.max_num_batched_tokens=512"],
                        ["rag: goodput 1.40x (1.10..1.80x)"])
    apply.write(change)
    text = recipe.read_text()
    assert "# keep me" in text and "# the port" in text
    assert "# forklift tune: rag: goodput 1.40x" in text
    d = resolve(str(recipe))
    assert (d.recipe.serve.max_num_seqs, d.recipe.serve.max_num_batched_tokens) == (4, 512)
    again = apply.plan(recipe, ["serve.max_num_seqs=2"], ["chat: 1.3x"])
    assert again.after.count("forklift tune:") == 1 and "max_num_seqs: 2" in again.after


def test_apply_refuses_a_bundled_recipe_and_foreign_keys(tmp_path: Path) -> None:
    with pytest.raises(TuneError, match="bundled recipe"):
        apply.plan(Path("default"), ["serve.max_num_seqs=4"], [])
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model:\n  source: bundled:smollm2-135m-instruct\nnodes:\n  - host: localhost\n"
                      "    hardware: cpu\n")
    with pytest.raises(TuneError, match="only serve"):
        apply.plan(recipe, ["model.source=x"], [])
    with pytest.raises(TuneError, match="would not load"):
        apply.plan(recipe, ["serve.max_num_seqs=0"], [])
