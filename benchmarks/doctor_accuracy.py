"""Precision and recall of doctor's top finding's category on the collected log excerpts.

Two sets: ``tests/data/doctor/excerpts`` (the rules were written from these) and
``tests/data/doctor/heldout`` (collected afterwards; no rule was changed for them). An excerpt with
no expected category is a healthy log: its correct answer is "no error finding".

Per category: precision = correct top predictions / top predictions of that category,
recall = correct top predictions / excerpts of that category. Micro figures over all excerpts.
Writes bench-results/doctor_accuracy.json.

    python benchmarks/doctor_accuracy.py
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

from forklift.doctor import diagnose

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "doctor"


def evaluate(folder: Path) -> dict[str, object]:
    rows = []
    for meta in sorted(folder.glob("*.source.yaml")):
        m = yaml.safe_load(meta.read_text())
        log = meta.with_name(meta.name.removesuffix(".source.yaml") + ".log")
        findings = [f for f in diagnose(log.read_text(errors="replace").splitlines()) if f.severity != "info"]
        predicted = findings[0].category if findings else None
        rows.append({"excerpt": log.name, "expected": m["expect"]["category"], "predicted": predicted,
                     "rule": findings[0].rule if findings else None})
    tp: Counter[str] = Counter()
    pred: Counter[str] = Counter()
    gold: Counter[str] = Counter()
    for r in rows:
        if r["predicted"]:
            pred[str(r["predicted"])] += 1
        if r["expected"]:
            gold[str(r["expected"])] += 1
        if r["predicted"] and r["predicted"] == r["expected"]:
            tp[str(r["predicted"])] += 1
    n_tp, n_pred, n_gold = sum(tp.values()), sum(pred.values()), sum(gold.values())
    per_cat = {c: {"precision": round(tp[c] / pred[c], 3) if pred[c] else None,
                   "recall": round(tp[c] / gold[c], 3) if gold[c] else None,
                   "support": gold[c]} for c in sorted(set(pred) | set(gold))}
    healthy = [r for r in rows if r["expected"] is None]
    return {
        "excerpts": len(rows),
        "precision": round(n_tp / n_pred, 3) if n_pred else None,
        "recall": round(n_tp / n_gold, 3) if n_gold else None,
        "healthy_logs_without_error_finding": f"{sum(1 for r in healthy if r['predicted'] is None)}/{len(healthy)}",
        "per_category": per_cat,
        "misses": [r for r in rows if r["predicted"] != r["expected"]],
    }


def main() -> int:
    t0 = time.monotonic()
    result = {
        "benchmark": "doctor_accuracy",
        "metric": "top finding's category (info-severity findings ignored)",
        "all": evaluate(DATA / "excerpts"),
        "heldout": evaluate(DATA / "heldout"),
        "seconds": 0.0,
    }
    result["seconds"] = round(time.monotonic() - t0, 2)
    out = REPO / "bench-results" / "doctor_accuracy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for part in ("all", "heldout"):
        r = result[part]
        assert isinstance(r, dict)
        sys.stdout.write(f"{part}: {r['excerpts']} excerpts, precision {r['precision']}, recall {r['recall']}\n")
    sys.stdout.write(f"wrote {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
