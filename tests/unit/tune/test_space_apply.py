"""Candidates pruned by the plan (the real planner on the bundled default, no processes) and --apply."""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.errors import TuneError
from forklift.recipe.deployment import Deployment, resolve
from forklift.tune import apply, space
from forklift.tune.slo import parse
from forklift.tune.workloads import Workload, synthetic

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
    from forklift.plan import Plan, Unplanned, for_launch

    calls: list[list[str]] = []

    def plan_fn(dep: Deployment) -> Plan | Unplanned:
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


def test_long_prompts_under_a_tight_tpot_rank_fewer_streams_first() -> None:
    """Every other stream's prefill stalls a request's decode: with ~2.5 s prefills (a slow host) and a TPOT limit
    the defaults' 4 streams cannot meet, the plan puts a max_num_seqs cap first; with a loose TPOT limit the cap
    only adds queueing, and the baseline is predicted best."""
    from forklift.plan import Plan, for_launch

    def slow(dep: Deployment) -> Plan:
        p = for_launch(dep)
        assert isinstance(p, Plan)
        return p.model_copy(update={"roofline": p.roofline.model_copy(update={"prefill_tok_s": 500.0})})

    w = synthetic("summarize", count=16)
    w = type(w)(w.name, 4, w.requests, w.description, w.shared_prefix, w.source, w.meta)
    tight = space.build(resolve("default"), w, parse("ttft_p95=15000,tpot_p95=80"), plan_fn=slow, max_candidates=3)
    assert tight.candidates[1].sets[0].startswith("serve.max_num_seqs=")
    assert tight.candidates[1].predicted > 2 * tight.candidates[0].predicted
    loose = space.build(resolve("default"), w, parse("ttft_p95=15000,tpot_p95=1000"), plan_fn=slow, max_candidates=3)
    assert loose.candidates[0].predicted >= max(c.predicted for c in loose.candidates[1:])
    assert not any(s.startswith("serve.max_num_seqs=") for c in loose.candidates[1:2] for s in c.sets)


def test_speculative_depth_is_searched_only_when_the_recipe_speculates() -> None:
    w = synthetic("chat", count=8)
    spec = space.build(resolve("default", ["serve.speculative.method=ngram",
                                           "serve.speculative.num_speculative_tokens=4"]), w, SLO, max_candidates=50)
    depths = {s for c in spec.candidates for s in c.sets if s.startswith("serve.speculative.")}
    assert depths == {"serve.speculative.num_speculative_tokens=2", "serve.speculative.num_speculative_tokens=8"}
    assert any(c.name == "spec_k=2" for c in spec.candidates)
    plain = space.build(resolve("default"), w, SLO, max_candidates=50)
    assert not any(s.startswith("serve.speculative.") for c in plain.candidates for s in c.sets)
    assert any("without speculation" in n for n in plain.notes)


def test_measured_baseline_reranks_past_an_optimistic_roofline() -> None:
    """The plan's roofline puts the prefill at ~2,350 tok/s here, so a cap on the streams ranks below the kept
    candidates; the baseline's measured medians (~500 tok/s prefill) bring it in from the reserve."""
    w = synthetic("summarize", count=16)
    w = type(w)(w.name, 4, w.requests, w.description, w.shared_prefix, w.source, w.meta)
    slo = parse("ttft_p95=15000,tpot_p95=80")
    sp = space.build(resolve("default"), w, slo, max_candidates=2)
    assert not any(s.startswith("serve.max_num_seqs=") for c in sp.candidates for s in c.sets)
    assert any(s.startswith("serve.max_num_seqs=") for c in sp.reserve for s in c.sets)
    m = space.calibrate(sp.plans["baseline"], w, ttft_p50_ms=2500.0, tpot_p50_ms=130.0)
    assert m is not None and 400 < m.prefill_tok_s < 600
    again = space.rerank(sp, w, slo, m)
    assert len(again) == 2 and again[0].sets[0].startswith("serve.max_num_seqs=")
    # a baseline that already caps the streams below the users measures queueing, not one prefill
    capped = space.build(resolve("default", ["serve.max_num_seqs=2"]), w, slo)
    assert space.calibrate(capped.plans["baseline"], w, 2500.0, 130.0) is None


def test_flow_reranks_the_grid_from_the_baselines_first_runs(tmp_path: Path) -> None:
    from forklift.tune import flow
    from forklift.tune.search import RunSample

    started: list[str] = []

    class Slow:
        """The baseline as this shared host runs it: ~2.5 s prefills, 130 ms TPOT at 4 users."""

        def start(self, c: space.Candidate) -> str:
            started.append(c.name)
            return c.name

        def bench(self, c: space.Candidate, w: Workload, start: str) -> RunSample:
            return RunSample(c.name, w.name, start, 0.2, 20.0, 25.0, 5, 5, 0, True,
                             {"ttft_p50": 2500.0, "tpot_p50": 130.0})

        def stop(self, c: space.Candidate) -> None:
            return None

    req = flow.Request("default", ("summarize",), "ttft_p95=15000,tpot_p95=80", 60.0, (), 4, 1.0, 25.0, 1, 2, 0,
                       False, False, tmp_path)
    result = flow.run(req, measurer=Slow())
    assert started[0] == "baseline" and started[1].startswith("max_num_seqs=")
    assert result.outcome is not None
    assert any(n.startswith("re-ranked after the baseline: measured prefill") for n in result.outcome.notes)
    explicit = flow.run(flow.Request("default", ("summarize",), "tpot_p95=80", 60.0, (), 4, 1.0, 25.0, 1, 2, 0,
                                     False, False, tmp_path / "e", candidates=("serve.max_num_batched_tokens=512",)),
                        measurer=Slow())
    assert explicit.outcome is not None
    assert not any("re-ranked" in n for n in explicit.outcome.notes)  # named candidates keep their order
