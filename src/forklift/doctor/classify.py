"""The statistical layer: a linear model over ``features.terms`` that names a category for wordings no rule has seen.

The model is data: ``doctor/data/classifier.json`` (format ``FORMAT``), written by
``scripts/doctor_train.py`` from the TRAIN split only. Per term it stores the idf and the per-class
weights; per class an intercept; and the temperature that calibrates the softmax (fitted on held-apart
folds of the training split). Inference is pure Python: no scikit-learn at run time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from forklift.doctor.features import terms, vector
from forklift.doctor.findings import Line
from forklift.errors import DoctorError

FORMAT = "forklift-doctor-linear/1"


@dataclass(frozen=True)
class Prediction:
    category: str
    probability: float
    evidence: list[Line]


class Classifier:
    """Multinomial logistic regression over sparse tf-idf terms, with a calibration temperature."""

    def __init__(self, data: dict[str, Any]) -> None:
        if data.get("format") != FORMAT:
            raise DoctorError(f"doctor classifier: format {data.get('format')!r}, expected {FORMAT!r}",
                              fix="Retrain it: python scripts/doctor_train.py")
        self.version = str(data["version"])
        self.classes: list[str] = list(data["classes"])
        self.intercept: list[float] = [float(x) for x in data["intercept"]]
        self.temperature = float(data.get("temperature", 1.0))
        self.threshold = float(data.get("threshold", 0.5))
        self.meta: dict[str, Any] = dict(data.get("meta", {}))
        self.idf: dict[str, float] = {}
        self.weights: dict[str, list[tuple[int, float]]] = {}
        for term, idf, row in data["terms"]:
            self.idf[term] = float(idf)
            self.weights[term] = [(int(c), float(w)) for c, w in row]

    def scores(self, text: str) -> list[float]:
        out = list(self.intercept)
        for term, value in vector(text, self.idf).items():
            for c, w in self.weights[term]:
                out[c] += value * w
        return out

    def probabilities(self, text: str) -> dict[str, float]:
        scores = [s / self.temperature for s in self.scores(text)]
        top = max(scores)
        exps = [math.exp(s - top) for s in scores]
        total = sum(exps)
        return {c: e / total for c, e in zip(self.classes, exps, strict=True)}

    def line_scores(self, lines: Sequence[Line]) -> list[list[float]]:
        """Per line, how hard its terms push towards each class (weights x idf x (1 + ln tf))."""
        out = []
        for line in lines:
            row = [0.0] * len(self.classes)
            for term, count in terms(line.text).items():
                for k, w in self.weights.get(term, ()):
                    row[k] += w * self.idf[term] * (1.0 + math.log(count))
            out.append(row)
        return out

    def evidence(self, lines: Sequence[Line], category: str, n: int = 2,
                 scores: list[list[float]] | None = None) -> list[Line]:
        """The lines that push hardest towards a category."""
        c = self.classes.index(category)
        scores = scores if scores is not None else self.line_scores(lines)
        scored = [(row[c], i, line) for i, (row, line) in enumerate(zip(scores, lines, strict=True)) if row[c] > 0]
        best = sorted(scored, key=lambda t: (-t[0], t[1]))[:n]
        return [line for _, _, line in sorted(best, key=lambda t: t[1])]

    def predict(self, text: str, lines: Sequence[Line], top: int = 3) -> list[Prediction]:
        probs = self.probabilities(text)
        ranked = sorted(probs.items(), key=lambda kv: -kv[1])[:top]
        scores = self.line_scores(lines)
        return [Prediction(c, p, self.evidence(lines, c, scores=scores)) for c, p in ranked]


def load_classifier(path: Path | None = None) -> Classifier:
    if path is not None:
        return Classifier(json.loads(path.read_text(encoding="utf-8")))
    return _bundled()


@lru_cache(maxsize=1)
def _bundled() -> Classifier:
    entry = resources.files("forklift.doctor") / "data" / "classifier.json"
    try:
        return Classifier(json.loads(entry.read_text(encoding="utf-8")))
    except FileNotFoundError as exc:
        raise DoctorError("doctor classifier: data/classifier.json is missing",
                          fix="Train it: python scripts/doctor_train.py") from exc
