"""Doctor's development figure: grouped cross-validation by thread of the whole engine over all measured data.

    PYTHONPATH=src:.:/path/to/scikit-learn python scripts/doctor_cv.py [--folds 10] [--c 10] [--by repository]

Items: every labelled item of ``training_items`` (benchmarks/_doctor_corpus.py) (the corpus's train and held-out
parts, the fresh batches in DEV_BATCHES, the older corpus). Folds: GroupKFold by source thread, or with
``--by repository`` by the thread's repository (``owner/name`` of ``owner/name#N``; other sources are their own
group), so no repository has items on both sides of a fold: how the engine does on a repository it never saw.
The corpus records when an item was collected, not when its thread was written, so no by-month split is offered.
Per fold the classifier is refitted as the training script fits it (the fold's own vocabulary, the knowledge documents
without the rules' example lines), and its out-of-fold probabilities (temperature fitted on them) feed the
engine, which runs as ``forklift doctor`` runs it (rules + classifier + combination).

The rules are fixed, and many were written from these threads, so two engine figures are given:
``engine`` (rules as shipped) and ``strict`` (for each item the rules that cite its own thread in their
references are removed: how the engine does on a thread whose rule was never written). Both per category
(items, right, "no finding"), and the strict misses (expected -> predicted, layer, rule, p).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import doctor_train as t  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.model_selection import GroupKFold  # noqa: E402

from forklift.doctor import diagnosis as engine  # noqa: E402
from forklift.doctor.diagnosis import Source, diagnose_sources  # noqa: E402
from forklift.doctor.features import terms, window_text  # noqa: E402
from forklift.doctor.kb import load_rules  # noqa: E402
from forklift.doctor.match import Matcher, rank  # noqa: E402
from forklift.doctor.findings import Finding  # noqa: E402
from forklift.doctor.scan import scan_text  # noqa: E402


class _Without(Matcher):
    """The shipped rules less some (those that cite the thread being scored)."""

    def __init__(self, base: Matcher, drop: set[str]) -> None:
        self.__dict__.update(base.__dict__)
        self._base, self._drop = base, drop

    def run(self, lines: Any, *, vllm_version: str | None = None) -> list[Finding]:
        found = [replace(f, superseded_by=None) for f in self._base.run(lines, vllm_version=vllm_version)
                 if f.rule not in self._drop]
        return rank(found, self.by_id)


def repository(thread: str) -> str:
    """``owner/name`` of an ``owner/name#N`` thread; any other source is its own group."""
    head, sep, _ = thread.partition("#")
    return head if sep and "/" in head and " " not in head else thread


def out_of_fold(docs: list[Any], y: np.ndarray, groups: list[str], n_classes: int, c: float,
                folds: int, classes: list[str]) -> np.ndarray:
    kd, kl = t.knowledge(classes, examples=False)
    scores = np.full((len(docs), n_classes), -1e9)
    for tr, te in GroupKFold(folds).split(np.zeros(len(docs)), y, groups):
        part = [docs[i] for i in tr] + kd
        labels = np.concatenate([y[tr], np.array(kl, dtype=y.dtype)])
        idf = t.vocabulary(part)
        index = {k: j for j, k in enumerate(idf)}
        model = t.prune(t.fit(t.matrix(part, idf, index), labels, c, "balanced"), t.PRUNE)
        s = model.decision_function(t.matrix([docs[i] for i in te], idf, index))
        for row, i in enumerate(te):
            for k, cls in enumerate(model.classes_):
                scores[i, cls] = s[row, k]
    real = np.where(scores > -1e8, scores, np.inf).min(axis=1, keepdims=True)
    return np.where(scores > -1e8, scores, real - 5.0)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--c", type=float, default=10.0)
    ap.add_argument("--by", choices=("thread", "repository"), default="thread")
    ap.add_argument("--dump", type=Path, help="write each item's expected and engine / strict top finding (JSON)")
    args = ap.parse_args(argv)
    items = t.training_items()
    classes = sorted({str(it.category) for it in items})
    y = np.array([classes.index(str(it.category)) for it in items])
    groups = [it.thread if args.by == "thread" else repository(it.thread) for it in items]
    excerpts = [scan_text([it.text]) for it in items]
    docs = [terms(window_text(e.lines)) for e in excerpts]
    s = out_of_fold(docs, y, groups, len(classes), args.c, args.folds, classes)
    temp = t.temperature(s, y)
    z = s / temp
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    print(f"{len(items)} items, {len(set(groups))} groups by {args.by}, {len(classes)} classes; classifier "
          f"out-of-fold top-1 "
          f"{float((s.argmax(axis=1) == y).mean()):.4f} (C={args.c}, T={temp})")
    cites: dict[str, set[str]] = defaultdict(set)
    for r in load_rules():
        for ref in r.references:
            cites[ref].add(r.id)
    base = Matcher(load_rules())
    current = {"i": 0}

    def fake(classifier: Any, sources: Any, ctx: Any, phase: Any) -> dict[str, float]:
        return {c: float(p[current["i"], k]) for k, c in enumerate(classes)}

    original = engine._model_distribution
    engine._model_distribution = fake  # type: ignore[assignment]
    results: dict[str, list[tuple[str | None, str | None, str | None, float]]] = {"engine": [], "strict": []}
    try:
        for i, it in enumerate(items):
            current["i"] = i
            for mode, matcher in (("engine", base), ("strict", _Without(base, cites.get(it.thread, set())))):
                rep = diagnose_sources([Source(it.stem, excerpts[i])], matcher=matcher)
                act = [f for f in rep.findings if f.severity != "info" and not f.superseded_by] or rep.findings
                f = act[0] if act else None
                results[mode].append((f.category, f.layer, f.rule, f.confidence) if f else (None, None, None, 0.0))
    finally:
        engine._model_distribution = original  # type: ignore[assignment]
    for mode, rows in results.items():
        ok = sum(r[0] == it.category for r, it in zip(rows, items, strict=True))
        none = sum(r[0] is None for r in rows)
        print(f"{mode}: top-1 {ok / len(items):.4f} ({ok}/{len(items)}), no finding {none}")
    print(f"{'category':36s} {'n':>4s} {'engine':>7s} {'none':>5s} {'strict':>7s} {'none':>5s}")
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for i, it in enumerate(items):
        row = per[str(it.category)]
        row[0] += 1
        row[1] += results["engine"][i][0] == it.category
        row[2] += results["engine"][i][0] is None
        row[3] += results["strict"][i][0] == it.category
        row[4] += results["strict"][i][0] is None
    for c, (n, e, en, st, sn) in sorted(per.items()):
        print(f"{c:36s} {n:4d} {e:7d} {en:5d} {st:7d} {sn:5d}")
    confusions = Counter((str(it.category), str(r[0])) for r, it in zip(results["strict"], items, strict=True)
                         if r[0] != it.category)
    print("strict confusions:", ", ".join(f"{a} -> {b} x{n}" for (a, b), n in confusions.most_common(15)))
    if args.dump:
        rows_out = [{"item": it.stem, "thread": it.thread, "expected": it.category,
                     **{f"{mode}_{k}": v for mode in results
                        for k, v in zip(("category", "layer", "rule", "p"), results[mode][i], strict=True)}}
                    for i, it in enumerate(items)]
        args.dump.write_text(json.dumps(rows_out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
