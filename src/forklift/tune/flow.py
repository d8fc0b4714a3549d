"""``tune.run(request)``: resolve the recipe, the workload and the SLO, prune the candidates with the plan, search
inside the budget, write ``tune.json``, ``tune.md`` and ``pareto.html``, and (``apply``) write the winner into the
recipe file with the evidence as a comment."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.errors import TuneError
from forklift.recipe.deployment import Deployment, resolve
from forklift.tune import apply as apply_mod
from forklift.tune import evidence, report, search, space
from forklift.tune.slo import TuneSlo
from forklift.tune.slo import parse as parse_slo
from forklift.tune.workloads import Workload
from forklift.tune.workloads import resolve as resolve_workload

MIN_BUDGET_S = 60.0


@dataclass(frozen=True)
class Request:
    recipe: str
    workloads: tuple[str, ...]
    slo: str
    budget_min: float
    overrides: tuple[str, ...] = ()
    concurrency: int | None = None
    size: float = 1.0
    run_s: float = 60.0
    max_runs: int = 3
    max_candidates: int = 6
    confirm: int = 1
    apply: bool = False
    dry_run: bool = False
    out_dir: Path | None = None
    run_name: str = "tune"
    prior_noise: float | None = None
    """Run-to-run noise of one run from a fresh start (log sd) for the intervals; None: compare's vLLM-CPU figure."""
    candidates: tuple[str, ...] = ()
    """Explicit candidates instead of the plan's grid: each a space-separated list of ``serve.KEY=VALUE``."""
    requests: int = 64
    """Distinct requests of a synthetic workload (sent in order, cycling): more than a run sends, so that a
    workload without shared prefixes does not hit the prefix cache on its second lap."""


@dataclass
class Result:
    request: Request
    slo: TuneSlo
    workloads: list[Workload]
    space: space.Space
    outcome: search.Outcome | None = None
    table: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    applied: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        r = self.request
        return {"recipe": r.recipe, "overrides": list(r.overrides), "slo": self.slo.to_json(),
                "budget_s": r.budget_min * 60, "dry_run": r.dry_run,
                "workloads": [w.to_json() for w in self.workloads], "space": self.space.to_json(),
                "outcome": self.outcome.to_json() if self.outcome else None, "table": self.table,
                "files": self.files, "applied": self.applied}


def prepare(req: Request) -> tuple[Deployment, TuneSlo, list[Workload], space.Space]:
    slo = parse_slo(req.slo)
    if req.prior_noise is not None and not 0 < req.prior_noise < 5:
        raise TuneError(f"--prior-noise {req.prior_noise}", fix="Pass the run noise as a fraction (0.05 = 5%).")
    if req.budget_min * 60 < MIN_BUDGET_S and not req.dry_run:
        raise TuneError(f"--budget {req.budget_min:g} minutes is too short for one start and one run",
                        fix=f"Pass --budget {MIN_BUDGET_S / 60:g} or more (minutes).")
    deployment = resolve(req.recipe, list(req.overrides))
    max_len = deployment.recipe.serve.max_model_len
    cap = None if max_len is None else int(max_len * 0.6 / space.TOKENS_PER_WORD)
    workloads = [resolve_workload(w, concurrency=req.concurrency, size=req.size, count=req.requests,
                                   max_prompt_words=cap)
                 for w in req.workloads]
    if not workloads:
        raise TuneError("no workload", fix="Pass --workload chat|rag|code|agent|summarize|FILE.")
    for c in req.candidates:
        bad = [x for x in c.split() if not x.startswith("serve.") or "=" not in x]
        if bad:
            raise TuneError(f"--candidate {c!r}: {bad[0]!r} is not serve.KEY=VALUE",
                            fix="Pass for example --candidate 'serve.max_num_seqs=8 serve.max_num_batched_tokens=512'.")
    sp = space.build(deployment, workloads[0], slo, max_candidates=req.max_candidates,
                     explicit=[c.split() for c in req.candidates])
    return deployment, slo, workloads, sp


def evidence_lines(result: Result) -> list[str]:
    out = result.outcome
    assert out is not None
    lines = [f"{time.strftime('%Y-%m-%d')} SLO {result.slo.text()}, budget {result.request.budget_min:g} min"]
    for w, v in out.versus_baseline.items():
        if v.get("ratio") is not None:
            lines.append(f"{w}: {v['winner']} goodput {v['ratio']:.2f}x vLLM's defaults "
                         f"({100 * v['confidence']:.0f}% interval {v['interval'][0]:.2f}..{v['interval'][1]:.2f}x, "
                         f"{v['starts']['baseline']}+{v['starts']['winner']} starts): {v['verdict']}")
    return lines


def run(req: Request, *, measurer: search.Measurer | None = None, on_event: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic) -> Result:
    deployment, slo, workloads, sp = prepare(req)
    result = Result(req, slo, workloads, sp)
    if req.dry_run:
        return result
    folder = req.out_dir or Path("tune-results") / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    if measurer is None:
        from forklift.tune.live import LiveMeasurer

        measurer = LiveMeasurer(deployment, slo, folder, run_s=req.run_s, name=req.run_name,
                                on_event=on_event or (lambda _: None))
    opts = search.Options(budget_s=req.budget_min * 60, max_runs=req.max_runs, confirm=req.confirm,
                          guess_run_s=req.run_s + 10,
                          prior_noise=req.prior_noise if req.prior_noise is not None else evidence.DEFAULT_PRIOR)
    reranked: list[str] = []

    def rerank(base: search.Trial) -> list[space.Candidate] | None:
        """The plan's ranking again with the baseline's measured medians on the first workload (grid only)."""
        w = workloads[0]
        got = [s.percentiles_ms for s in base.samples if s.workload == w.name]
        ttft = [v for p in got if (v := p.get("ttft_p50")) is not None]
        tpot = [v for p in got if (v := p.get("tpot_p50")) is not None]
        plan = sp.plans.get("baseline")
        if plan is None or not ttft or not tpot:
            return None
        m = space.calibrate(plan, w, statistics.median(ttft), statistics.median(tpot))
        if m is None:
            return None
        again = list(space.rerank(sp, w, slo, m))
        reranked.append(f"re-ranked after the baseline: measured prefill {m.prefill_tok_s:.0f} tok/s (plan "
                        f"{plan.roofline.prefill_tok_s:.0f}), decode step {m.step_scale:.2f}x the plan's; order "
                        + ", ".join(c.name for c in again))
        return again

    result.outcome = search.run(sp.candidates, workloads, measurer, opts, clock=clock,
                                on_event=on_event or (lambda _: None), rerank=None if req.candidates else rerank)
    result.outcome.notes += reranked
    result.table = report.rows(result.outcome, slo, opts.prior_noise)
    title = f"forklift tune {req.recipe}"
    files = {"json": folder / "tune.json", "md": folder / "tune.md", "html": folder / "pareto.html"}
    files["md"].write_text(report.markdown(result.outcome, slo, result.table, title), encoding="utf-8")
    files["html"].write_text(report.page(result.outcome, slo, result.table, title), encoding="utf-8")
    result.files = {k: str(v) for k, v in files.items()}
    if req.apply:
        result.applied = apply_winner(result)
    files["json"].write_text(json.dumps(result.to_json(), indent=2), encoding="utf-8")
    return result


def apply_winner(result: Result) -> dict[str, Any]:
    """Write the first workload's winner into the recipe when it beat the baseline with confidence."""
    out = result.outcome
    assert out is not None
    w = out.workloads[0]
    v = out.versus_baseline.get(w, {})
    winner = out.trial(out.winner[w]).candidate if w in out.winner else None
    if winner is None or winner.is_baseline:
        return {"applied": False, "reason": "the baseline won: nothing to change"}
    if v.get("verdict") != "better":
        return {"applied": False, "reason": f"{winner.name} is not better with confidence ({v.get('verdict')}): "
                                            "the recipe is left as it is"}
    change = apply_mod.plan(Path(result.request.recipe), winner.sets, evidence_lines(result))
    apply_mod.write(change)
    return {"applied": True, "sets": list(winner.sets), "path": str(change.path), "diff": change.diff}


def candidates_table(sp: space.Space) -> list[dict[str, Any]]:
    return [c.to_json() for c in sp.candidates]


def sets_of(items: Sequence[str]) -> tuple[str, ...]:
    return tuple(items)
