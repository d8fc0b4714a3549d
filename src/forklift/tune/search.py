"""The sequential search: one candidate at a time in the plan's order, inside a time budget.

For each candidate: start it (one server start), bench every workload once per round for up to ``max_runs``
rounds, then stop it. After each round the candidate is compared with the best so far on every workload
(``evidence.relative``, compare's start-level interval): when the whole interval is below zero on every workload
it cannot beat the best and is stopped early. Before a start or a run, the time it is expected to take (the mean
of the starts and runs seen so far, ``guess_start_s`` before the first) must fit what is left of the budget;
otherwise the search ends there and says so.

Then, with what is left and ``confirm`` rounds, the baseline and the winner are started again alternately
(A/B/A/B, one run of each workload per start) so the final interval rests on more than one start a side.

Before any other candidate starts, ``rerank`` may reorder them from what the baseline's runs measured (``flow``
predicts them again with the measured prefill rate and step: the plan's roofline can be far off on a shared host).

Measurement goes through ``Measurer`` (the live one starts recipes with ``forklift up``; tests pass a fake).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from forklift.errors import ForkliftError
from forklift.tune import evidence
from forklift.tune.space import Candidate
from forklift.tune.workloads import Workload


@dataclass(frozen=True)
class RunSample:
    """One bench run of one workload against one start of one candidate."""

    candidate: str
    workload: str
    start: str
    goodput_req_s: float
    output_tok_s: float
    duration_s: float
    requests: int
    good: int
    failed: int
    met_slo: bool
    percentiles_ms: dict[str, float | None] = field(default_factory=dict)
    """The SLO's percentiles (ttft_p95 ...) plus ttft_p50 / tpot_p50 / e2e_p95 for the table and the plot."""

    @property
    def floored(self) -> float:
        return evidence.floor_goodput(self.goodput_req_s, self.duration_s)

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "workload": self.workload, "start": self.start,
                "goodput_req_s": round(self.goodput_req_s, 5), "output_tok_s": round(self.output_tok_s, 3),
                "duration_s": round(self.duration_s, 3), "requests": self.requests, "good": self.good,
                "failed": self.failed, "met_slo": self.met_slo,
                "percentiles_ms": {k: None if v is None else round(v, 3) for k, v in self.percentiles_ms.items()}}


class Measurer(Protocol):
    def start(self, candidate: Candidate) -> str:
        """Start the candidate; returns the start's id. Raises ForkliftError when it does not start."""
        ...

    def bench(self, candidate: Candidate, workload: Workload, start: str) -> RunSample: ...

    def stop(self, candidate: Candidate) -> None: ...


@dataclass
class Trial:
    candidate: Candidate
    samples: list[RunSample] = field(default_factory=list)
    status: str = "not measured"
    """measured, stopped early, failed, skipped (budget)"""
    reason: str = ""
    start_s: list[float] = field(default_factory=list)

    def groups(self, workload: str) -> list[list[float]]:
        by: dict[str, list[float]] = {}
        for s in self.samples:
            if s.workload == workload:
                by.setdefault(s.start, []).append(s.floored)
        return list(by.values())

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_json(), "status": self.status, "reason": self.reason,
                "start_s": [round(x, 1) for x in self.start_s], "runs": [s.to_json() for s in self.samples]}


@dataclass(frozen=True)
class Options:
    budget_s: float
    max_runs: int = 3
    confirm: int = 1
    """A/B rounds after the search (each: one more start of the baseline and of the winner)."""
    prior_noise: float = evidence.DEFAULT_PRIOR
    confidence: float = evidence.DEFAULT_CONFIDENCE
    guess_start_s: float = 120.0
    guess_run_s: float = 60.0


@dataclass
class Outcome:
    workloads: list[str]
    trials: list[Trial]
    winner: dict[str, str] = field(default_factory=dict)
    """Per workload, the candidate with the highest goodput (geometric mean over starts)."""
    versus_baseline: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    budget_s: float = 0.0

    def trial(self, name: str) -> Trial:
        return next(t for t in self.trials if t.candidate.name == name)

    def to_json(self) -> dict[str, Any]:
        return {"workloads": self.workloads, "winner": self.winner, "versus_baseline": self.versus_baseline,
                "seconds": round(self.seconds, 1), "budget_s": self.budget_s, "notes": self.notes,
                "trials": [t.to_json() for t in self.trials]}


Event = Callable[[str], None]


def _noop(_: str) -> None:
    return None


class _Clock:
    def __init__(self, budget_s: float, clock: Callable[[], float]) -> None:
        self.clock, self.t0, self.budget = clock, clock(), budget_s

    @property
    def left(self) -> float:
        return self.budget - (self.clock() - self.t0)


def _mean(xs: Sequence[float], default: float) -> float:
    return sum(xs) / len(xs) if xs else default


def _noise(trials: Sequence[Trial], workload: str, prior: float) -> float:
    """The prior, or this session's run-to-run noise on this workload when larger (``evidence.noise_for``)."""
    return evidence.noise_for([g for t in trials for g in t.groups(workload)], prior)


def _best(trials: Sequence[Trial], workload: str, prior: float) -> Trial | None:
    scored = [(lv.value, t) for t in trials
              if t.samples and (lv := evidence.level(t.groups(workload), prior_sd=prior)) is not None]
    return max(scored, key=lambda x: x[0])[1] if scored else None


Rerank = Callable[["Trial"], Sequence[Candidate] | None]


def run(candidates: Sequence[Candidate], workloads: Sequence[Workload], measurer: Measurer, opts: Options, *,
        clock: Callable[[], float] = time.monotonic, on_event: Event = _noop, rerank: Rerank | None = None) -> Outcome:
    """Measure the candidates in order inside ``opts.budget_s`` (see the module's doc). The first candidate is
    the baseline every other is reported against. ``rerank``: called with the baseline's trial once it is measured;
    the candidates it returns (None: keep them) replace the rest."""
    timer = _Clock(opts.budget_s, clock)
    names = [w.name for w in workloads]
    out = Outcome(names, [Trial(c) for c in candidates], budget_s=opts.budget_s)
    starts: list[float] = []
    runs: list[float] = []

    def one_start(trial: Trial, rounds: int, early_stop: bool) -> bool:
        need = _mean(starts, opts.guess_start_s) + len(workloads) * _mean(runs, opts.guess_run_s)
        if need > timer.left:
            return False
        on_event(f"starting {trial.candidate.name}")
        t = clock()
        try:
            start_id = measurer.start(trial.candidate)
        except ForkliftError as exc:
            trial.status, trial.reason = "failed", f"did not start: {exc}"
            with_stop(trial)
            return True
        starts.append(clock() - t)
        trial.start_s.append(starts[-1])
        try:
            for k in range(rounds):
                if k and len(workloads) * _mean(runs, opts.guess_run_s) > timer.left:
                    trial.reason = trial.reason or f"stopped after {k} round(s): the budget"
                    break
                for w in workloads:
                    on_event(f"{trial.candidate.name}: {w.name} run {k + 1}")
                    t = clock()
                    trial.samples.append(measurer.bench(trial.candidate, w, start_id))
                    runs.append(clock() - t)
                if early_stop and _cannot_win(trial):
                    trial.status = "stopped early"
                    break
        except ForkliftError as exc:
            trial.status, trial.reason = "failed", f"bench failed: {exc}"
        finally:
            with_stop(trial)
        if trial.status == "not measured":
            trial.status = "measured"
        return True

    def with_stop(trial: Trial) -> None:
        try:
            measurer.stop(trial.candidate)
        except ForkliftError as exc:
            out.notes.append(f"{trial.candidate.name}: stop failed: {exc}")

    def _cannot_win(trial: Trial) -> bool:
        verdicts = []
        for w in names:
            best = _best([t for t in out.trials if t is not trial and t.status != "failed"], w, opts.prior_noise)
            if best is None:
                return False
            iv = evidence.relative(best.groups(w), trial.groups(w), prior_sd=_noise(out.trials, w, opts.prior_noise),
                                   confidence=opts.confidence)
            if iv is None or iv.high >= 0:
                return False
            verdicts.append(f"{w}: {100 * iv.low:+.0f}%..{100 * iv.high:+.0f}% against {best.candidate.name}")
        trial.reason = "cannot beat the best: " + "; ".join(verdicts)
        return True

    i = 0
    while i < len(out.trials):
        trial = out.trials[i]
        if not one_start(trial, opts.max_runs, early_stop=i > 0):
            for skipped in out.trials[i:]:
                skipped.status, skipped.reason = "skipped (budget)", f"{timer.left:.0f} s left, a start and a round " \
                    f"take ~{_mean(starts, opts.guess_start_s) + len(workloads) * _mean(runs, opts.guess_run_s):.0f} s"
            break
        if i == 0 and rerank is not None and trial.samples:
            again = rerank(trial)
            if again is not None:
                out.trials[1:] = [Trial(c) for c in again]
        i += 1

    base = out.trials[0]
    for w in names:
        best = _best([t for t in out.trials if t.status != "failed"], w, opts.prior_noise)
        if best is not None:
            out.winner[w] = best.candidate.name
    challengers = {out.winner[w] for w in names if w in out.winner} - {base.candidate.name}
    for _ in range(opts.confirm):
        if not challengers or base.status == "failed":
            break
        for trial in [base, *(out.trial(c) for c in sorted(challengers))]:
            if not one_start(trial, 1, early_stop=False):
                out.notes.append(f"confirmation stopped before {trial.candidate.name}: the budget")
                break
        else:
            continue
        break
    for w in names:
        final = _best([t for t in out.trials if t.status != "failed"], w, opts.prior_noise)
        if final is not None:
            out.winner[w] = final.candidate.name
        noise = _noise(out.trials, w, opts.prior_noise)
        out.versus_baseline[w] = _versus(base, final, w, opts, noise)
        rest = _best([t for t in out.trials[1:] if t.status != "failed"], w, opts.prior_noise)
        if rest is not None and final is base:  # the baseline won: how close the best other came
            out.versus_baseline[w]["challenger"] = _versus(base, rest, w, opts, noise)
    out.seconds = opts.budget_s - timer.left
    return out


def _versus(base: Trial, best: Trial | None, w: str, opts: Options, noise: float) -> dict[str, Any]:
    if best is None or not base.groups(w):
        return {"verdict": "not compared", "reason": "the baseline or every candidate has no run"}
    lb = evidence.level(base.groups(w), prior_sd=noise, confidence=opts.confidence)
    lw = evidence.level(best.groups(w), prior_sd=noise, confidence=opts.confidence)
    iv = evidence.relative(base.groups(w), best.groups(w), prior_sd=noise, confidence=opts.confidence)
    ratio = None if lb is None or lw is None else lw.value / lb.value
    return {"winner": best.candidate.name, "ratio": None if ratio is None else round(ratio, 4),
            "interval": None if iv is None else [round(1 + iv.low, 4), round(1 + iv.high, 4)],
            "confidence": opts.confidence, "noise_per_run": round(noise, 4),
            "verdict": evidence.verdict(iv) if best is not base else "baseline wins",
            "starts": {"baseline": lb.starts if lb else 0, "winner": lw.starts if lw else 0},
            "runs": {"baseline": lb.runs if lb else 0, "winner": lw.runs if lw else 0},
            "zero_goodput_runs": sum(1 for t in (base, best) for s in t.samples
                                     if s.workload == w and s.goodput_req_s <= 0 and not math.isnan(s.goodput_req_s))}
