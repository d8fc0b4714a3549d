"""How often doctor's top finding names the right category, on data it was and was not built from.

Parts (``benchmarks/_doctor_corpus.py`` loads them):

- ``fresh``: the frozen fresh batches (``fresh_batches`` in split.yaml: e to k), found by symptom in threads not
  in the corpus and held out whatever their hash; each measured once, at the end of the round that froze it.
  The batches not trained on yet (``out_of_sample_batches``: those outside ``DEV_BATCHES``; k since round 8)
  give the out-of-sample figure, printed first, per batch and per category.
- ``heldout``: the round-2 corpus's held-out threads (split by a hash of the thread before any rule or model
  was written; ``tests/data/doctor/corpus/split.yaml``). Never used to write or tune rules; measured in rounds 3
  and 4, so no longer clean: a reference figure.
- ``train``: the rest of the round-2 corpus (rules were written from it).
- ``old-insample`` / ``old-heldout``: round 1's excerpts and its held-out batch, relabelled to the round-2
  taxonomy (``RELABEL``); reported apart.

Since round 5 the classifier is trained on every part measured before (train, held-out, the fresh batches in
``DEV_BATCHES``, round 1's corpus: scripts/doctor_train.py), so those figures are in-sample for it; the
out-of-sample figure is the fresh batch collected after that training, and the development figure is the grouped
cross-validation by thread of scripts/doctor_cv.py.

Per part: top-1 category accuracy (the top finding: first error/warning finding, else the first note),
"no finding" rate, "unsure" rate (top probability below the threshold; the top candidate still counts for
top-1), accuracy of confident answers, calibration of the top probability (reliability bins, expected
calibration error, Brier score), and, for held-out, the rules-only figure beside the full engine's and
the misses (expected -> predicted). Corpus size per category (train / held-out) is listed. Writes
bench-results/doctor_accuracy.json.

    python -m benchmarks.doctor_accuracy
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks._doctor_corpus import Item, corpus_items, load_split, old_items, out_of_sample_batches
from forklift.doctor import Source, diagnose_sources, load_classifier, load_rules, scan_text

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-results" / "doctor_accuracy.json"
BINS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01)


def predict(item: Item, *, use_model: bool = True) -> dict[str, Any]:
    report = diagnose_sources([Source(item.stem, scan_text([item.text]))], use_model=use_model)
    active = [f for f in report.findings if f.severity != "info" and not f.superseded_by]
    top = active[0] if active else (report.findings[0] if report.findings else None)
    return {
        "item": item.stem, "thread": item.thread, "expected": item.category,
        "predicted": top.category if top else None, "rule": top.rule if top else None,
        "layer": top.layer if top else None, "p": round(top.confidence, 3) if top else None,
        "unsure": report.unsure,
    }


def _calibration(rows: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in rows if r["p"] is not None and r["expected"] is not None]
    bins = []
    ece = 0.0
    for lo, hi in zip(BINS, BINS[1:], strict=False):
        inside = [r for r in scored if lo <= r["p"] < hi]
        if inside:
            mean_p = sum(r["p"] for r in inside) / len(inside)
            acc = sum(r["predicted"] == r["expected"] for r in inside) / len(inside)
            ece += len(inside) / len(scored) * abs(mean_p - acc)
            bins.append({"p": f"{lo:.1f}-{min(hi, 1.0):.1f}", "n": len(inside), "mean_p": round(mean_p, 3),
                         "accuracy": round(acc, 3)})
    brier = sum((r["p"] - (r["predicted"] == r["expected"])) ** 2 for r in scored) / len(scored) if scored else None
    return {"bins": bins, "ece": round(ece, 3), "brier": round(brier, 3) if brier is not None else None}


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    labelled = [r for r in rows if r["expected"] is not None]
    healthy = [r for r in rows if r["expected"] is None]
    n = len(labelled)
    correct = sum(r["predicted"] == r["expected"] for r in labelled)
    none = sum(r["predicted"] is None for r in labelled)
    unsure = sum(r["unsure"] for r in labelled)
    confident = [r for r in labelled if r["predicted"] is not None and not r["unsure"]]
    return {
        "items": n,
        "top1": round(correct / n, 3) if n else None,
        "correct": correct,
        "no_finding": round(none / n, 3) if n else None,
        "no_finding_count": none,
        "unsure": round(unsure / n, 3) if n else None,
        "confident_accuracy": round(sum(r["predicted"] == r["expected"] for r in confident) / len(confident), 3)
        if confident else None,
        "confident_count": len(confident),
        "healthy_logs_clean": f"{sum(r['predicted'] is None for r in healthy)}/{len(healthy)}",
        "calibration": _calibration(labelled),
    }


def per_category(train: list[Item], held: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    tr = Counter(str(i.category) for i in train)
    he = Counter(str(r["expected"]) for r in held)
    ok = Counter(str(r["expected"]) for r in held if r["predicted"] == r["expected"])
    for c in sorted(set(tr) | set(he)):
        out[c] = {"train": tr[c], "heldout": he[c], "heldout_correct": ok[c]}
    return out


def fresh_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The fresh batches: the ones not trained on (out of sample), all together, per batch, per category of the
    out-of-sample ones (items, correct), and the misses."""
    split = load_split()
    batches = {name: set(b["threads"]) for name, b in (split.get("fresh_batches") or {}).items()}
    oos_names = out_of_sample_batches(split)
    oos = [r for r in rows if any(r["thread"] in batches[name] for name in oos_names)]
    cats: dict[str, dict[str, int]] = {}
    for r in oos:
        c = cats.setdefault(str(r["expected"]), {"items": 0, "correct": 0})
        c["items"] += 1
        c["correct"] += int(r["predicted"] == r["expected"])
    return {
        "out_of_sample_batches": oos_names,
        "out_of_sample": score(oos),
        "all": score(rows),
        "by_batch": {name: score([r for r in rows if r["thread"] in threads]) for name, threads in batches.items()},
        "per_category": dict(sorted(cats.items())),
        "misses": [f"{r['expected']} -> {r['predicted']} ({r['item']}, {r['rule']}, p={r['p']})"
                   for r in oos if r["predicted"] != r["expected"]],
    }


def main() -> int:
    t0 = time.monotonic()
    parts = {
        "fresh": corpus_items(("fresh",)),
        "heldout": corpus_items(("heldout",)),
        "train": corpus_items(("train",)),
        "old-insample": old_items("excerpts"),
        "old-heldout": old_items("heldout"),
    }
    rows = {name: [predict(it) for it in items] for name, items in parts.items()}
    rules_only = [predict(it, use_model=False) for it in parts["heldout"]]
    result: dict[str, Any] = {
        "benchmark": "doctor_accuracy",
        "metric": "top finding's category; 'no finding' = nothing at all; unsure = top p below the threshold",
        "rules": len(load_rules()),
        "classifier": load_classifier().version,
        "threshold": load_classifier().threshold,
        "fresh": fresh_report(rows["fresh"]),
        "headline_heldout": score(rows["heldout"]),
        "heldout_note": "measured in rounds 3 and 4: no longer clean; the fresh batches are the out-of-sample figure",
        "heldout_rules_only": score(rules_only),
        "in_sample_train": score(rows["train"]),
        "old_insample": score(rows["old-insample"]),
        "old_heldout": score(rows["old-heldout"]),
        "corpus_per_category": per_category(parts["train"], rows["heldout"]),
        "heldout_threads": len({r["thread"] for r in rows["heldout"]}),
        "heldout_misses": [f"{r['expected']} -> {r['predicted']} ({r['item']}, {r['rule']}, p={r['p']})"
                           for r in rows["heldout"] if r["predicted"] != r["expected"]],
        "seconds": 0.0,
    }
    result["seconds"] = round(time.monotonic() - t0, 2)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    w = sys.stdout.write
    fresh = result["fresh"]
    oos_name = "out of sample (fresh " + "+".join(fresh["out_of_sample_batches"]) + ")"
    for name, r in [(oos_name, fresh["out_of_sample"]), ("fresh, all batches", fresh["all"]),
                    *((f"fresh {b}", r) for b, r in fresh["by_batch"].items())]:
        w(f"{name}: {r['items']} items, top-1 {r['top1']} ({r['correct']}), no finding {r['no_finding']}, "
          f"unsure {r['unsure']}, confident accuracy {r['confident_accuracy']} ({r['confident_count']})\n")
    for key in ("headline_heldout", "heldout_rules_only", "in_sample_train", "old_insample", "old_heldout"):
        r = result[key]
        w(f"{key}: {r['items']} items, top-1 {r['top1']} ({r['correct']}), no finding {r['no_finding']}, "
          f"unsure {r['unsure']}, confident accuracy {r['confident_accuracy']} ({r['confident_count']}), "
          f"ECE {r['calibration']['ece']}, healthy clean {r['healthy_logs_clean']}\n")
    w(f"held-out threads {result['heldout_threads']}; misses {len(result['heldout_misses'])}; wrote {OUT}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
