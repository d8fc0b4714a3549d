"""The layered diagnosis: exact signatures, then the statistical layer, then context; one calibrated report.

1. Rules (``rules/*.yaml``) run over each source's kept lines. A rule's ``confidence`` is its prior.
2. The classifier (``data/classifier.json``) reads the error window of all sources together and gives a
   distribution over categories, shifted by the context's priors (``context.priors``).
3. Combination, a product of experts: each category's score is the statistical layer's probability;
   a category with a matching rule of confidence c has it raised to at least RULE_FLOOR and multiplied
   by 1 + RULE_WEIGHT * c / (1 - c). Scores are normalised into the reported probabilities. So a
   confident rule wins unless the text says clearly otherwise, and a weak rule (c ~ 0.5) is a tie-breaker.
   A matching rule's ``rules_out`` categories (a boundary of categories.yaml: a named collective rules out a
   shared-memory stall, a failed allocation a KV shortage) keep RULED_OUT of their statistical score unless a
   rule of their own matches too.
   Without the statistical layer the rule's confidence is the probability. RULE_WEIGHT and RULE_FLOOR
   were chosen on the training split (out-of-fold classifier probabilities), never on held-out data.
   With neither a rule, a line that reports a failure nor a written report, the classifier still reads the
   input, and its top category is reported only at probability >= MODEL_ONLY_MIN (chosen on the training split
   and on the healthy logs of the older corpus: below it, no finding).
4. Below ``threshold`` the report is ``unsure``: its findings are candidates to verify, not a diagnosis.
``benchmarks/doctor_accuracy.py`` reports how well these probabilities are calibrated on held-out data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from forklift.doctor.classify import Classifier, load_classifier
from forklift.doctor.context import Context, phase_of, priors
from forklift.doctor.features import failure_line, report_like, window, window_text
from forklift.doctor.findings import Finding, Line, Report, Rule
from forklift.doctor.kb import load_categories
from forklift.doctor.match import MAX_QUOTED, Matcher, default_matcher, rank
from forklift.doctor.quiet import SERVING, Split, split, stalled
from forklift.doctor.scan import Excerpt, scan_text
from forklift.errors import DoctorError

DEFAULT_THRESHOLD = 0.5
CANDIDATES = 3
RULE_WEIGHT = 2.0
EVIDENCE_LINES = 150
RULE_FLOOR = 0.1
RULED_OUT = 0.1
MODEL_ONLY_MIN = 0.6
TAIL = 12


@dataclass(frozen=True)
class Source:
    """One input: a file, a rank's log, a node's dmesg. ``host`` is the node it came from, when known."""

    label: str
    excerpt: Excerpt
    host: str | None = None


def _rule_findings(sources: Sequence[Source], matcher: Matcher, version: str | None) -> list[Finding]:
    merged: dict[str, Finding] = {}
    for src in sources:
        for f in matcher.run(src.excerpt.lines, vllm_version=version):
            f = replace(f, superseded_by=None, host=f.host or src.host)
            old = merged.get(f.rule)
            if old is None:
                merged[f.rule] = f
                continue
            evidence = (old.evidence + [e for e in f.evidence if e not in old.evidence])[:MAX_QUOTED]
            hosts = ", ".join(h for h in dict.fromkeys([*(old.host or "").split(", "), f.host or ""]) if h)
            merged[f.rule] = replace(old, evidence=evidence, lines=[e.text for e in evidence], host=hosts or None)
    return rank(list(merged.values()), matcher.by_id)


def _model_distribution(classifier: Classifier, sources: Sequence[Source], ctx: Context | None,
                        phase: str | None) -> dict[str, float]:
    text = "\n".join(window_text(s.excerpt.lines) for s in sources)
    probs = classifier.probabilities(text)
    shift = priors(ctx, phase)
    if shift:
        probs = {c: p * shift.get(c, 1.0) for c, p in probs.items()}
        total = sum(probs.values())
        probs = {c: p / total for c, p in probs.items()}
    return probs


def _model_finding(category: str, p: float, evidence: list[Line], classifier: Classifier) -> Finding:
    info = load_categories()[category]
    return Finding(
        rule=f"model:{category}", title=info.title, category=category, severity="error", confidence=p,
        cause=info.cause, fix=info.fix, lines=[e.text for e in evidence],
        references=[f"doctor classifier {classifier.version}"], layer="model", key=info.key,
        evidence=evidence,
        facts={"verify": info.verify},
    )


def _failure_evidence(sources: Sequence[Source]) -> bool:
    """Worth asking the statistical layer: a line reports a failure, or the input is a written report (people
    write prose about failures, and on the training split the classifier names most wordless reports right)."""
    for s in sources:
        texts = s.excerpt.texts()
        if any(failure_line(t) for t in texts) or report_like(texts):
            return True
    return False


def _all_lines(sources: Sequence[Source]) -> list[Line]:
    return [line for s in sources for line in s.excerpt.lines]


def _rule_odds(confidence: float) -> float:
    """How much a matching rule multiplies its category's odds: 1 + K * c / (1 - c)."""
    c = min(confidence, 0.995)
    return 1.0 + RULE_WEIGHT * c / (1.0 - c)


def _combine(active: list[Finding], probs: dict[str, float], classifier: Classifier | None,
             sources: Sequence[Source], ruled_out: frozenset[str] = frozenset()) -> list[Finding]:
    """Ranked findings with probabilities (see the module docstring)."""
    best: dict[str, Finding] = {}
    for f in active:
        best.setdefault(f.category, f)
    if probs:
        score = {c: v * (RULED_OUT if c in ruled_out and c not in best else 1.0) for c, v in probs.items()}
        for c, f in best.items():
            score[c] = max(probs.get(c, 0.0), RULE_FLOOR) * _rule_odds(f.confidence)
    else:
        top_conf = active[0].confidence if active else 0.0
        score = {c: f.confidence for c, f in best.items()}
        rest = sum(v for c, v in score.items() if c != active[0].category) if active else 0.0
        if active and rest > 0:
            scale = (1.0 - top_conf) / rest
            score = {c: (v if c == active[0].category else v * min(1.0, scale)) for c, v in score.items()}
    total = sum(score.values()) or 1.0
    q = {c: v / total for c, v in score.items()}
    ranked = sorted(q.items(), key=lambda kv: (-kv[1], kv[0] not in best))
    windows = [x for s in sources for x in window(s.excerpt.lines)]
    lines = [x for x in windows if failure_line(x.text)][-EVIDENCE_LINES:]
    scores = classifier.line_scores(lines) if classifier is not None else []
    every = windows[-EVIDENCE_LINES:]
    every_scores: list[list[float]] | None = None
    out: list[Finding] = []
    for c, p in ranked:
        if c in best:
            out.append(replace(best[c], confidence=p))
        elif classifier is not None and len(out) < max(CANDIDATES, len(best)):
            evidence = classifier.evidence(lines, c, scores=scores)
            if not evidence:  # no failure line speaks for it: a line of a written report may
                every_scores = every_scores if every_scores is not None else classifier.line_scores(every)
                evidence = classifier.evidence(every, c, scores=every_scores)
            if evidence:  # a category no line speaks for is the classifier's prior, never shown
                out.append(_model_finding(c, p, evidence, classifier))
        if len(out) >= max(CANDIDATES, len(best)) and all(x in {f.category for f in out} for x in best):
            break
    return out


def _apply_patch_context(f: Finding, ctx: Context | None) -> Finding:
    if ctx is None or not f.patch:
        return f
    if f.patch in ctx.patches_applied:
        return replace(
            f, category="patch_drift", confidence=f.confidence * 0.8,
            cause=f"{f.cause} The catalog patch {f.patch} is applied on this run and the failure remains, so "
                  "the code it patches has moved on in this vLLM release.",
            fix=f"Check it on each node with `forklift patch status {f.patch}` and across releases with "
                f"`forklift patch check {f.patch}`; pin a vLLM release the patch supports.")
    if f.patch not in ctx.patches_wanted:
        return replace(f, fix=f"Add `patches: [{f.patch}]` to the recipe (forklift applies and verifies it on every "
                              f"node before the start), or run `forklift patch apply {f.patch}`. {f.fix}")
    return f


def _tail(sources: Sequence[Source]) -> list[str]:
    return [x.text for x in _all_lines(sources) if failure_line(x.text)][-TAIL:]


def _quiet(sources: Sequence[Source]) -> tuple[list[Source], list[Split], bool]:
    """The sources with what a healthy run writes set apart (``quiet.split``), the splits, and whether the run
    reached serving."""
    run_served = any(SERVING.search(x.text) for x in _all_lines(sources))
    splits = [split(s.excerpt.lines, run_served) for s in sources]
    quiet = [replace(s, excerpt=replace(s.excerpt, lines=sp.kept)) for s, sp in zip(sources, splits, strict=True)]
    return quiet, splits, run_served


def _survived_notes(splits: Sequence[Split], matcher: Matcher, version: str | None) -> list[Finding]:
    """Notes (info) for the request errors the server answered after: what the rules say they were."""
    lines = [x for sp in splits for x in sp.survived]
    if not lines:
        return []
    out = []
    for f in matcher.run(lines, vllm_version=version):
        if f.severity == "info" or f.superseded_by:
            continue
        out.append(replace(
            f, severity="info", title=f"a request failed while the server kept serving: {f.title}",
            cause=f"{f.cause} The server answered requests (HTTP 2xx) after these lines: a request failed, the "
                  "deployment did not."))
    return out


def diagnose_sources(sources: Sequence[Source], context: Context | None = None, *,
                     matcher: Matcher | None = None, classifier: Classifier | None = None,
                     use_model: bool = True, threshold: float | None = None) -> Report:
    """The report for a run's sources (files, rank logs, node collections) and what is known about the run.

    What a healthy run writes is not read as a failure (``quiet``): DEBUG lines, the teardown after a deliberate
    stop of a run that reached serving, and request errors the server answered after. A run that reached serving
    with no failure line left gets no finding from the classifier alone, and no finding is shown without lines
    that speak for it."""
    matcher = matcher or default_matcher()
    version = context.vllm_version if context else None
    phase = phase_of(x.text for x in _all_lines(sources))
    sources, splits, run_served = _quiet(sources)
    found = _rule_findings(sources, matcher, version)
    active = [f for f in found if f.severity != "info" and not f.superseded_by]
    passive = [f for f in found if f not in active]
    if use_model and classifier is None:
        try:
            classifier = load_classifier()
        except DoctorError:  # a missing or foreign model file: the rules still answer
            classifier = None
    probs: dict[str, float] = {}
    stuck = [line for s in sources if (line := stalled(s.excerpt.lines)) is not None]
    if classifier is not None and (active or stuck or _failure_evidence(sources)):
        probs = _model_distribution(classifier, sources, context, phase)
    elif classifier is not None and not run_served and any(s.excerpt.lines for s in sources):
        probs = _model_distribution(classifier, sources, context, phase)
        if max(probs.values(), default=0.0) < MODEL_ONLY_MIN:  # no failure line and no clear cause: no finding
            probs = {}
    ruled_out = frozenset(c for f in active if (r := matcher.by_id.get(f.rule)) is not None for c in r.rules_out)
    findings = _combine(active, probs, classifier if probs else None, sources, ruled_out)
    if findings:
        findings[0] = _apply_patch_context(findings[0], context)
        if context and context.failed_host and not findings[0].host:
            findings[0] = replace(findings[0], host=context.failed_host)
    else:
        passive = _survived_notes(splits, matcher, version) + passive
    limit = threshold if threshold is not None else (classifier.threshold if classifier else DEFAULT_THRESHOLD)
    unsure = bool(findings) and findings[0].confidence < limit
    total_lines = sum(s.excerpt.total_lines for s in sources)
    total_bytes = sum(s.excerpt.total_bytes for s in sources)
    tail = _tail([replace(s, excerpt=replace(s.excerpt, lines=sorted(sp.kept + sp.survived, key=lambda x: x.number)))
                  for s, sp in zip(sources, splits, strict=True)])
    return Report(findings + passive, total_lines, tail, unsure=unsure, threshold=limit,
                  bytes_read=total_bytes, phase=(context.phase if context and context.phase else phase),
                  context=context.to_json() if context else {})


def diagnose_report(lines: Iterable[str], *, vllm_version: str | None = None,
                    rules: Sequence[Rule] | None = None, use_model: bool = True) -> Report:
    """A report for log lines that are already text (one source)."""
    matcher = default_matcher() if rules is None else Matcher(rules)
    ctx = Context(vllm_version=vllm_version) if vllm_version else None
    return diagnose_sources([Source("input", scan_text(lines))], ctx, matcher=matcher, use_model=use_model)


def diagnose(lines: Iterable[str], *, vllm_version: str | None = None) -> list[Finding]:
    """Ranked findings for log lines (any mix of ranks, colours and progress bars), most likely first."""
    return diagnose_report(lines, vllm_version=vllm_version).findings
