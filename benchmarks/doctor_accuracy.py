"""Precision and recall of doctor's top finding's category, in-sample and held-out, reported apart.

Two sets of real log excerpts (each ``NAME.log`` beside ``NAME.source.yaml`` naming its source and
the expected category):

- ``tests/data/doctor/excerpts``: in-sample. The rules were written from these.
- ``tests/data/doctor/heldout``: held out. Batch 1 (4 excerpts) was collected after the first rules;
  batch 2 (15 of 46 excerpts collected on 2026-11-30) was split off before any rule change, by
  sorting on sha256(source) and taking every third one. No rule was written or tuned from them.

An excerpt with no expected category is a healthy log: its correct answer is "no error finding".
Info-severity findings are ignored (they never count as a prediction).

Per category: precision = correct top predictions / top predictions of that category,
recall = correct top predictions / excerpts of that category. Micro figures over a whole part, with
the counts behind them. Held-out misses are listed as a confusion list (expected -> predicted).
Writes bench-results/doctor_accuracy.json.

    python benchmarks/doctor_accuracy.py
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from forklift.doctor import diagnose, load_rules

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "doctor"


def _rows(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for meta in sorted(folder.glob("*.source.yaml")):
        m = yaml.safe_load(meta.read_text())
        log = meta.with_name(meta.name.removesuffix(".source.yaml") + ".log")
        findings = [f for f in diagnose(log.read_text(errors="replace").splitlines()) if f.severity != "info"]
        note = str(m.get("note") or "")
        rows.append({
            "excerpt": log.name,
            "source": m["source"],
            "batch": 2 if "batch 2" in note else 1,
            "expected": m["expect"]["category"],
            "predicted": findings[0].category if findings else None,
            "rule": findings[0].rule if findings else None,
        })
    return rows


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
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
                   "correct": tp[c], "predicted": pred[c], "support": gold[c]}
               for c in sorted(set(pred) | set(gold))}
    healthy = [r for r in rows if r["expected"] is None]
    return {
        "excerpts": len(rows),
        "correct": n_tp,
        "predicted": n_pred,
        "with_expected_category": n_gold,
        "precision": round(n_tp / n_pred, 3) if n_pred else None,
        "recall": round(n_tp / n_gold, 3) if n_gold else None,
        "healthy_logs_without_error_finding": f"{sum(1 for r in healthy if r['predicted'] is None)}/{len(healthy)}",
        "per_category": per_cat,
    }


def evaluate(folder: Path, *, by_batch: bool = False) -> dict[str, Any]:
    rows = _rows(folder)
    out = score(rows)
    if by_batch:
        out["by_batch"] = {str(b): {k: v for k, v in score([r for r in rows if r["batch"] == b]).items()
                                    if k != "per_category"}
                           for b in sorted({r["batch"] for r in rows})}
    out["misses"] = [r for r in rows if r["predicted"] != r["expected"]]
    return out


def _line(name: str, r: dict[str, Any]) -> str:
    return (f"{name}: {r['excerpts']} excerpts; precision {r['precision']} ({r['correct']}/{r['predicted']}), "
            f"recall {r['recall']} ({r['correct']}/{r['with_expected_category']}); "
            f"healthy logs clean {r['healthy_logs_without_error_finding']}\n")


def main() -> int:
    t0 = time.monotonic()
    in_sample = evaluate(DATA / "excerpts")
    heldout = evaluate(DATA / "heldout", by_batch=True)
    result: dict[str, Any] = {
        "benchmark": "doctor_accuracy",
        "metric": "top finding's category (info-severity findings ignored)",
        "rules": len(load_rules()),
        "in_sample": in_sample,
        "heldout": heldout,
        "heldout_confusion": [f"{m['expected']} -> {m['predicted']} ({m['excerpt']}, {m['source']})"
                              for m in heldout["misses"]],
        "seconds": 0.0,
    }
    result["seconds"] = round(time.monotonic() - t0, 2)
    out = REPO / "bench-results" / "doctor_accuracy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    w = sys.stdout.write
    w(f"rules: {result['rules']}\n")
    w(_line("in-sample", in_sample))
    w(_line("held-out", heldout))
    for batch, r in heldout["by_batch"].items():
        w("  " + _line(f"held-out batch {batch}", r))
    w(f"held-out misses ({len(heldout['misses'])}), expected -> predicted:\n")
    for line in result["heldout_confusion"]:
        w(f"  {line}\n")
    if in_sample["misses"]:
        w(f"in-sample misses ({len(in_sample['misses'])}): "
          + ", ".join(f"{m['excerpt']} ({m['expected']} -> {m['predicted']})" for m in in_sample["misses"]) + "\n")
    w(f"wrote {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
