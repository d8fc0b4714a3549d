"""Train doctor's statistical layer on all development data and write src/forklift/doctor/data/classifier.json.

    PYTHONPATH=src:/path/to/scikit-learn python scripts/doctor_train.py [--check]

Needs scikit-learn (training only; inference is pure Python in forklift.doctor.classify). Deterministic:
the same corpus gives the same file (lbfgs, fixed folds, sorted terms, rounded weights).

Data (round 5): every labelled item that has already been measured, so is development data now: the
corpus's train and held-out parts, the fresh batches named in DEV_BATCHES, and the older excerpts and
held-out batch (tests/data/doctor/excerpts, tests/data/doctor/heldout). The out-of-sample figure is a fresh
batch collected after this training and measured once; a batch added to split.yaml later is not trained on
until it is named in DEV_BATCHES. The figures of benchmarks/doctor_accuracy.py on the parts listed here are
in-sample for the classifier.

Knowledge documents join the training data: per rule its title, cause and fix,
per category (categories.yaml) its title, cause, fix and how to verify it; the final fit also gets each
rule's example lines (verbatim from the training corpus or the software's source). Cross-validation keeps
the knowledge documents in every training fold and leaves the example lines out (they may come from the
fold being scored).

Steps: features.terms of each item's classifier window; vocabulary = terms in >= MIN_DF training items;
idf = ln((1 + n) / (1 + df)) + 1; multinomial logistic regression on L2-normalised (1 + ln tf) * idf.
C and class weighting are chosen by grouped 5-fold cross-validation (folds by thread); the softmax
temperature is fitted on the out-of-fold scores (minimum log loss); weights below PRUNE (raised step by step
until the file is under MAX_BYTES) are dropped.
``--check`` retrains in memory and fails if the shipped file differs (the file is reproducible).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from benchmarks._doctor_corpus import Item, training_items  # noqa: E402
from scipy.sparse import csr_matrix  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GroupKFold  # noqa: E402

from forklift.doctor.classify import FORMAT  # noqa: E402
from forklift.doctor.features import terms, window_text  # noqa: E402
from forklift.doctor.kb import load_categories, load_rules  # noqa: E402
from forklift.doctor.scan import scan_text  # noqa: E402

OUT = REPO / "src" / "forklift" / "doctor" / "data" / "classifier.json"
MIN_DF = 3
FOLDS = 5
GRID_C = (3.0, 10.0, 30.0)
GRID_WEIGHT = ("balanced",)
PRUNE = 0.15
PRUNE_LEVELS = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
MAX_BYTES = 560 * 1024
DIGITS = 2
THRESHOLD = 0.5


def knowledge(classes: list[str], *, examples: bool) -> tuple[list[Counter[str]], list[int]]:
    """Documents written from the rules and the category descriptions (labels: their category)."""
    docs: list[Counter[str]] = []
    labels: list[int] = []
    for r in load_rules():
        if r.category in classes:
            docs.append(terms("\n".join([r.title, r.cause, r.fix, *(r.examples if examples else [])])))
            labels.append(classes.index(r.category))
    for c, info in load_categories().items():
        if c in classes:
            docs.append(terms("\n".join([info.title, info.cause, info.fix, info.verify])))
            labels.append(classes.index(c))
    return docs, labels


def text_of(item: Item) -> str:
    return window_text(scan_text([item.text]).lines)


def vocabulary(docs: list[Counter[str]]) -> dict[str, float]:
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.keys())
    n = len(docs)
    return {t: math.log((1 + n) / (1 + k)) + 1.0 for t, k in sorted(df.items()) if k >= MIN_DF}


def matrix(docs: list[Counter[str]], idf: dict[str, float], index: dict[str, int]) -> csr_matrix:
    rows, cols, vals = [], [], []
    for i, d in enumerate(docs):
        w = {t: (1.0 + math.log(c)) * idf[t] for t, c in d.items() if t in idf}
        norm = math.sqrt(sum(v * v for v in w.values())) or 1.0
        for t, v in w.items():
            rows.append(i)
            cols.append(index[t])
            vals.append(v / norm)
    return csr_matrix((vals, (rows, cols)), shape=(len(docs), len(index)))


def fit(x: csr_matrix, y: np.ndarray, c: float, weight: str | None) -> LogisticRegression:
    model = LogisticRegression(C=c, class_weight=weight, max_iter=2000, tol=1e-4)
    return model.fit(x, y)


def prune(model: LogisticRegression, level: float) -> LogisticRegression:
    model.coef_ = np.where(np.abs(model.coef_) >= level, model.coef_, 0.0)
    return model


def out_of_fold(docs: list[Counter[str]], y: np.ndarray, groups: list[str], c: float,
                weight: str | None, n_classes: int, level: float = PRUNE,
                extra: tuple[list[Counter[str]], list[int]] = ([], [])) -> np.ndarray:
    """Out-of-fold decision scores; each fold's vocabulary comes from its own training part (plus ``extra``)."""
    scores = np.full((len(docs), n_classes), -1e9)
    for tr, te in GroupKFold(n_splits=FOLDS).split(np.zeros(len(docs)), y, groups):
        part = [docs[i] for i in tr] + extra[0]
        labels = np.concatenate([y[tr], np.array(extra[1], dtype=y.dtype)])
        idf = vocabulary(part)
        index = {t: k for k, t in enumerate(idf)}
        model = prune(fit(matrix(part, idf, index), labels, c, weight), level)
        s = model.decision_function(matrix([docs[i] for i in te], idf, index))
        for row, i in enumerate(te):
            for k, cls in enumerate(model.classes_):
                scores[i, cls] = s[row, k]
    real = np.where(scores > -1e8, scores, np.inf).min(axis=1, keepdims=True)
    return np.where(scores > -1e8, scores, real - 5.0)


def temperature(scores: np.ndarray, y: np.ndarray) -> float:
    best, best_t = math.inf, 1.0
    for t in np.arange(0.2, 3.01, 0.05):
        z = scores / t
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        nll = -float(logp[np.arange(len(y)), y].mean())
        if nll < best - 1e-9:
            best, best_t = nll, float(round(t, 2))
    return best_t


def train() -> dict[str, Any]:
    items = training_items()
    docs = [terms(text_of(it)) for it in items]
    classes = sorted({str(it.category) for it in items})
    y = np.array([classes.index(str(it.category)) for it in items])
    groups = [it.thread for it in items]
    cv_extra = knowledge(classes, examples=False)
    results = {}
    for weight in GRID_WEIGHT:
        for c in GRID_C:
            s = out_of_fold(docs, y, groups, c, weight, len(classes), extra=cv_extra)
            results[(c, weight)] = (float((s.argmax(axis=1) == y).mean()), s)
    (c_best, w_best), (acc, oof) = max(results.items(), key=lambda kv: (kv[1][0], -kv[0][0]))
    temp = temperature(oof, y)
    kdocs, klabels = knowledge(classes, examples=True)
    all_docs = docs + kdocs
    idf = vocabulary(all_docs)
    index = {t: k for k, t in enumerate(idf)}
    model = fit(matrix(all_docs, idf, index), np.concatenate([y, np.array(klabels, dtype=y.dtype)]), c_best, w_best)
    coef = np.zeros((len(classes), len(index)))
    intercept = np.zeros(len(classes))
    for k, cls in enumerate(model.classes_):
        coef[cls] = model.coef_[k]
        intercept[cls] = model.intercept_[k]
    level, rows = PRUNE, []
    for level in PRUNE_LEVELS:  # the smallest pruning that keeps the shipped file under MAX_BYTES
        rows = []
        for t, j in index.items():
            row = [[int(c), round(float(coef[c, j]), DIGITS)] for c in range(len(classes)) if abs(coef[c, j]) >= level]
            if row:
                rows.append([t, round(idf[t], 4), row])
        if len(json.dumps(rows, separators=(",", ":"))) <= MAX_BYTES - 16 * 1024:
            break
    knowledge_text = "\n".join(f"{r.id}:{r.title}:{r.cause}:{r.fix}:{r.examples}" for r in load_rules())
    digest = hashlib.sha256(("\n".join(f"{it.stem}:{it.category}:{it.text}" for it in items) + knowledge_text
                             + repr(sorted(load_categories().items()))).encode()).hexdigest()
    return {
        "format": FORMAT,
        "version": f"1.{digest[:8]}",
        "classes": classes,
        "intercept": [round(float(v), 4) for v in intercept],
        "temperature": temp,
        "threshold": THRESHOLD,
        "meta": {
            "trained_on": {"items": len(items), "threads": len(set(groups)), "knowledge_documents": len(kdocs),
                           "per_class": dict(Counter(classes[i] for i in y))},
            "data_sha256": digest,
            "cv": {"folds": FOLDS, "by": "thread", "accuracy": round(acc, 4), "C": c_best,
                   "class_weight": w_best, "grid": {f"{c}/{w}": round(a, 4) for (c, w), (a, _) in results.items()}},
            "terms": len(rows), "min_df": MIN_DF, "prune": level, "cv_prune": PRUNE,
            "scikit_learn": sklearn.__version__,
        },
        "terms": rows,
    }


def write_oof(path: Path) -> None:
    """Out-of-fold probabilities per training item (for evaluating the layers together on TRAIN only)."""
    items = training_items()
    docs = [terms(text_of(it)) for it in items]
    classes = sorted({str(it.category) for it in items})
    y = np.array([classes.index(str(it.category)) for it in items])
    data = json.loads(OUT.read_text())
    s = out_of_fold(docs, y, [it.thread for it in items], data["meta"]["cv"]["C"], data["meta"]["cv"]["class_weight"],
                    len(classes), extra=knowledge(classes, examples=False)) / data["temperature"]
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    path.write_text(json.dumps({it.stem: {c: round(float(p[i, k]), 5) for k, c in enumerate(classes)}
                                for i, it in enumerate(items)}))
    print(f"wrote out-of-fold probabilities for {len(items)} items to {path}")


def main(argv: list[str]) -> int:
    if "--oof" in argv:
        write_oof(Path(argv[argv.index("--oof") + 1]))
        return 0
    data = train()
    text = json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"
    if "--check" in argv:
        same = OUT.is_file() and OUT.read_text() == text
        print("classifier.json is reproducible" if same else "classifier.json differs from a fresh training")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    meta = data["meta"]
    print(f"wrote {OUT.relative_to(REPO)}: {len(text) / 1024:.0f} KiB, {meta['terms']} terms, "
          f"{len(data['classes'])} classes, {meta['trained_on']['items']} items; "
          f"CV accuracy {meta['cv']['accuracy']} (C={meta['cv']['C']}, {meta['cv']['class_weight']}), "
          f"temperature {data['temperature']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
