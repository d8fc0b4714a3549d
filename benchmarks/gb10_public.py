"""Benchmark (not a test): the GB10 unified-memory terms against public startup logs, train and held-out.

The threads (tests/data/calibration/gb10-public/threads.yaml) are split by a hash of their address before any
fitting; :func:`fit` derives data/gb10.yaml's constants from the train threads alone. What the public figures
can test without each thread's model being planned:

* the startup check: ceil(total x utilization) against the clean-node free reading range -> passes / fails /
  too close to call, against whether the thread's start passed the check;
* the KV pool across utilizations of one setup (the budget is total x utilization; nothing else in the sizing
  moves with it) and across repeat boots of the same settings (the spread no plan can beat);
* vLLM's CUDA-graph estimate on unified memory (the fitted excess over forklift's device form).

Seed 000 (its final setup and its first try) is planned in full by the planner and reported apart: no constant
comes from it.

Writes bench-results/gb10_public.json and bench-results/gb10_public.md.

    python -m benchmarks.gb10_public
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from forklift import recipe as recipes
from forklift.model.load import spec_for
from forklift.plan import gb10, make, rules, terms
from forklift.plan.make import deployment_of

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "calibration" / "gb10-public" / "threads.yaml"
CONFIGS = ROOT / "scripts" / "gpu" / "grid" / "models"
OUT = ROOT / "bench-results"
TOTAL_GIB = 121.69  # the gb10 hardware profile's total, where a thread does not print its own
SEED_LOGGED_GIB = 8.89  # seed 000: "8.89 GiB of KV available" (final setup); first try 0.16 GiB, no start


def load_threads(path: Path = DATA) -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(path.read_text())["threads"]
    return loaded


def split_of(url: str) -> str:
    """The split rule recorded in the data: held-out when the address hashes to 0 mod 3."""
    return "heldout" if int(hashlib.sha256(url.encode()).hexdigest()[:8], 16) % 3 == 0 else "train"


def _observations(threads: list[dict[str, Any]], split: str, kind: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(t, o) for t in threads if t["split"] == split for o in t["observations"] if o["kind"] == kind]


def device_graph_estimate(obs: dict[str, Any], version: str) -> float:
    """forklift's CUDA-graph estimate form (terms.cudagraph_estimate with a unified node's graph host memory) for
    one logged run, GiB, without the unified-memory excess."""
    config = json.loads((CONFIGS / f"{obs['config']}.config.json").read_text())
    config["num_hidden_layers"] = int(obs["layers"])
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "m"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(config))
        recipe = recipes.validate({"model": {"source": str(model), "load_format": "dummy"},
                                   "nodes": [{"host": "n0", "hardware": "gb10"}]})
        spec = spec_for(deployment_of(recipe).recipe.model).spec
    kv = str(obs.get("kv_cache_dtype", "auto"))
    batch = terms.Batch(tp=int(obs["tp"]), mnbt=int(obs["max_num_batched_tokens"]), seqs=int(obs["max_num_seqs"]),
                        max_model_len=int(obs["max_model_len"]), block=16, dtype_bytes=2,
                        tokens_to_experts=int(obs["max_num_batched_tokens"]), expert_tp=int(obs["tp"]),
                        capability="12.1", attention=terms.attention_backend(spec, "12.1", kv), unified=True,
                        layers=int(obs["layers"]))
    estimate, _ = terms.cudagraph_estimate(spec, rules.rules_for(version), batch)
    return estimate / gb10.GIB


def _logged_graph_estimate(obs: dict[str, Any]) -> float | None:
    if "estimated_gib" in obs:
        return float(obs["estimated_gib"])
    if "util_without_graphs" in obs:
        return (float(obs["util"]) - float(obs["util_without_graphs"])) * float(obs.get("total_gib", TOTAL_GIB))
    if "kv_gib_estimate_off" in obs:
        # gpu_worker.determine_available_memory subtracts the estimate only while
        # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is set: the two pools differ by exactly the estimate applied
        return float(obs["kv_gib_estimate_off"]) - float(obs["kv_gib_estimate_on"])
    return None


def fit(threads: list[dict[str, Any]]) -> dict[str, Any]:
    """data/gb10.yaml's ``fitted`` block from the TRAIN threads: medians, ranges and the largest spread."""
    pairs = [float(o["mem_available_gib"]) - float(o["free_gib"]) for _, o in _observations(threads, "train", "meminfo")
             if "free_gib" in o]
    free = [float(o["free_gib"]) for kind in ("meminfo", "check") for _, o in _observations(threads, "train", kind)
            if o.get("clean") and "free_gib" in o]
    excess = []
    for thread, obs in _observations(threads, "train", "graphs"):
        logged = _logged_graph_estimate(obs)
        if obs.get("speculative", "none") != "none" or logged is None or "config" not in obs:
            continue
        excess.append(logged - device_graph_estimate(obs, str(thread["vllm"]).split("+")[0]))
    repeats = [o for _, o in _observations(threads, "train", "repeat") if "kv_gib" in o and one_configuration(o)]
    spreads = [max(boots) - min(boots) for o in repeats for boots in _by_cache_state(o).values()]
    gains = [cold_warm_gain(o) for o in repeats]
    known = [x for x in gains if x is not None]
    return {"pre_snapshot_gib": round(statistics.median(pairs), 2),
            "free_at_init_gib": {"median": round(statistics.median(free), 2), "low": round(min(free), 2),
                                 "high": round(max(free), 2)},
            "cudagraph_excess_gib": round(statistics.median(excess), 2),
            "pool_band_gib": round(max(spreads), 2),
            "cold_compile_gib": round(statistics.median(known), 2) if known else None}


def _by_cache_state(obs: dict[str, Any]) -> dict[str, list[float]]:
    """A repeat's boots grouped by the compile-cache state the source gives for each (one group where it gives
    none): only boots of one state measure the run-to-run spread; across states the difference is a term
    (gb10.py, "Compile cache")."""
    boots = [float(x) for x in obs["kv_gib"]]
    states = obs.get("compile_cache") or ["unstated"] * len(boots)
    groups: dict[str, list[float]] = {}
    for state, kv in zip(states, boots, strict=True):
        groups.setdefault(str(state), []).append(kv)
    return groups


GEOMETRY_TOLERANCE = 0.01
"""How far a repeat's tokens per GiB may differ between boots and still be one KV configuration: vLLM reports
``num_blocks // len(kv_cache_groups) * min_block_size`` tokens (v1/core/kv_cache_utils.py _report_kv_cache_config)
with ``num_blocks = available // page_size // layers`` (get_num_blocks), so for fixed settings tokens follow the
pool's bytes to within one block (~0.2 % at the ~600 blocks of the threads) plus a thread's rounding of its
figures (a "1.75M" is good to 0.3 %)."""


def tokens_per_gib_spread(obs: dict[str, Any]) -> float | None:
    """How far the boots' tokens per GiB lie apart (largest / smallest - 1) for a repeat that gives both figures
    per boot; None where it does not."""
    gib, tokens = obs.get("kv_gib"), obs.get("kv_tokens")
    if not isinstance(gib, list) or not isinstance(tokens, list) or len(gib) != len(tokens) or len(gib) < 2:
        return None
    ratios = [float(t) / float(g) for t, g in zip(tokens, gib, strict=True)]
    return max(ratios) / min(ratios) - 1


def one_configuration(obs: dict[str, Any]) -> bool:
    """False for a repeat whose boots' tokens per GiB differ by more than :data:`GEOMETRY_TOLERANCE`: their block
    geometry (page size or group count) differed, so they were not the same KV configuration and their pools do not
    measure the run-to-run spread (the settings or the image changed between them)."""
    spread = tokens_per_gib_spread(obs)
    return spread is None or spread <= GEOMETRY_TOLERANCE


def cold_warm_gain(obs: dict[str, Any]) -> float | None:
    """A warm restart's pool less a cold start's, GiB, for one repeat that gives both states (means per state);
    None otherwise."""
    groups = _by_cache_state(obs) if "kv_gib" in obs else {}
    if "cold" not in groups or "warm" not in groups:
        return None
    return statistics.mean(groups["warm"]) - statistics.mean(groups["cold"])


@dataclass
class Row:
    split: str
    thread: str
    kind: str
    what: str
    logged: float | None
    predicted: float | None
    err_pct: float | None
    err_gib: float | None
    logged_verdict: str | None
    predicted_verdict: str | None
    verdict_ok: bool | None


def _pct(predicted: float, logged: float) -> float | None:
    return None if logged == 0 else round(100 * (predicted - logged) / abs(logged), 2)


def _ok(predicted: str, logged: str | None) -> bool | None:
    if logged is None or predicted == "too close to call":
        return None
    return predicted == logged


def _check_rows(threads: list[dict[str, Any]], split: str, g: gb10.Gb10Terms) -> list[Row]:
    rows = []
    for thread, obs in _observations(threads, split, "check"):
        if "util" not in obs or "passed" not in obs or not obs.get("clean"):
            continue
        requested = float(obs["util"]) * float(obs.get("total_gib", TOTAL_GIB))
        band = g.free_at_init
        predicted = ("fits" if requested <= band.low else "does not fit" if requested > band.high
                     else "too close to call")
        logged = "fits" if obs["passed"] else "does not fit"
        rows.append(Row(split, thread["id"], "startup check", f"util {obs['util']}: {requested:.2f} GiB requested",
                        obs.get("free_gib"), round(band.median, 2), None, None, logged, predicted,
                        _ok(predicted, logged)))
    return rows


def _kit(obs: dict[str, Any]) -> tuple[Any, ...]:
    return obs.get("kit", "a"), obs.get("load_format", "auto"), obs.get("max_model_len"), obs.get("rank", "head")


def _transfer_rows(threads: list[dict[str, Any]], split: str, g: gb10.Gb10Terms) -> list[Row]:
    """The pool at one utilization predicted from the same setup's pool at another: + (u2 - u1) x total."""
    rows = []
    for thread in (t for t in threads if t["split"] == split):
        known = [o for o in thread["observations"] if o["kind"] in ("pool", "repeat") and "util" in o
                 and isinstance(o.get("kv_gib"), (int, float, list))]
        for target in (o for o in known if o["kind"] == "pool" and isinstance(o["kv_gib"], (int, float))):
            bases = [o for o in known if o is not target and _kit(o) == _kit(target) and o["util"] != target["util"]]
            if not bases:
                continue
            base = bases[0]
            kv = base["kv_gib"]
            base_kv = statistics.mean(kv) if isinstance(kv, list) else float(kv)
            predicted = base_kv + (float(target["util"]) - float(base["util"])) * float(
                target.get("total_gib", TOTAL_GIB))
            logged_v = predicted_v = None
            if "needed_gib" in target:
                logged_v = "fits" if target.get("started") else "does not fit"
                predicted_v = gb10.verdict(predicted - float(target["needed_gib"]), g.pool_band_gib)
            rows.append(Row(split, thread["id"], "KV pool (utilization)",
                            f"util {base['util']} -> {target['util']}", float(target["kv_gib"]), round(predicted, 2),
                            _pct(predicted, float(target["kv_gib"])), round(predicted - float(target["kv_gib"]), 2),
                            logged_v, predicted_v,
                            None if logged_v is None or predicted_v is None else _ok(predicted_v, logged_v)))
    return rows


def _repeat_rows(threads: list[dict[str, Any]], split: str, cold_compile_gib: float | None = None) -> list[Row]:
    """Boots of the same settings: the first predicts the others (the spread no plan can beat). A thread that gives
    tokens rather than GiB is scored in percent only: one configuration's tokens are proportional to its blocks.
    Where the source gives each boot's compile-cache state, a warm boot is predicted from a cold first boot plus
    ``cold_compile_gib`` (gb10.py, "Compile cache"; nothing where it was not fitted). Nothing else is added: the
    free memory at start does not enter the pool (gb10.py, "Repeat boots"). A repeat whose boots were not one KV
    configuration (:func:`one_configuration`) is still scored, and labelled."""
    rows = []
    for thread, obs in _observations(threads, split, "repeat"):
        in_gib = "kv_gib" in obs
        first, *others = [float(x) for x in obs["kv_gib" if in_gib else "kv_tokens"]]
        states = [str(x) for x in obs.get("compile_cache") or []]
        for i, other in enumerate(others, start=1):
            what = f"util {obs.get('util', 'not stated')}, same settings" + ("" if in_gib else " (tokens)")
            predicted = first
            if not one_configuration(obs):
                what += (f", tokens per GiB differ by {100 * (tokens_per_gib_spread(obs) or 0.0):.1f}%: "
                         "not one KV configuration")
            if states and states[0] != states[i]:
                what += f", {states[0]} -> {states[i]} compile cache"
                sign = {("cold", "warm"): 1.0, ("warm", "cold"): -1.0}.get((states[0], states[i]), 0.0)
                predicted = first + sign * (cold_compile_gib or 0.0) if in_gib else first
            rows.append(Row(split, thread["id"], "KV pool (repeat boot)", what, other, round(predicted, 2),
                            _pct(predicted, other), round(predicted - other, 2) if in_gib else None, None, None,
                            None))
    return rows


def _graph_rows(threads: list[dict[str, Any]], split: str, g: gb10.Gb10Terms) -> list[Row]:
    rows = []
    for thread, obs in _observations(threads, split, "graphs"):
        logged = _logged_graph_estimate(obs)
        if logged is None:
            continue
        if obs.get("speculative", "none") != "none" or "config" not in obs:
            rows.append(Row(split, thread["id"], "CUDA-graph estimate", f"speculative {obs.get('speculative')}: "
                            "outside the form (no decided verdict)", round(logged, 2), None, None, None, None, None,
                            None))
            continue
        predicted = device_graph_estimate(obs, str(thread["vllm"]).split("+")[0]) + g.cudagraph_excess_gib
        rows.append(Row(split, thread["id"], "CUDA-graph estimate", "device form + unified excess", round(logged, 2),
                        round(predicted, 2), _pct(predicted, logged), round(predicted - logged, 2), None, None, None))
    return rows


def seed_rows() -> list[Row]:
    """Seed 000 planned in full: its final setup and its first try (0.88, vLLM's default batch limits, 32K)."""
    final = make(recipes.load("glm-4.7-nvfp4-2x-spark"))
    first = make(recipes.load("glm-4.7-nvfp4-2x-spark", [
        "serve.gpu_memory_utilization=0.88", "serve.max_num_batched_tokens=null", "serve.max_num_seqs=null",
        "serve.max_model_len=32768"]))
    pool = min(r.kv_pool_gib for r in final.ranks)
    first_pool = min(r.kv_pool_gib for r in first.ranks)
    return [Row("seed", "seed-000", "KV pool (full plan)", "final: 0.90, 8192/8, 64K", SEED_LOGGED_GIB, pool,
                _pct(pool, SEED_LOGGED_GIB), round(pool - SEED_LOGGED_GIB, 2), "fits", final.verdict,
                _ok(final.verdict, "fits")),
            Row("seed", "seed-000", "KV pool (full plan)", "first try: 0.88, vLLM defaults, 32K", 0.16, first_pool,
                None, round(first_pool - 0.16, 2), "does not fit", first.verdict, _ok(first.verdict, "does not fit"))]


def run(threads: list[dict[str, Any]] | None = None) -> list[Row]:
    threads = threads if threads is not None else load_threads()
    g = gb10.terms_for(rules.default_version())
    rows: list[Row] = []
    for split in ("train", "heldout"):
        rows += _check_rows(threads, split, g) + _transfer_rows(threads, split, g)
        rows += _repeat_rows(threads, split, g.cold_compile_gib)
        rows += _graph_rows(threads, split, g)
    return rows + seed_rows()


def summary(rows: list[Row], threads: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split in ("train", "heldout", "seed"):
        mine = [r for r in rows if r.split == split]
        pool = [abs(r.err_pct) for r in mine if r.kind.startswith("KV pool") and r.err_pct is not None]
        # the same figures without repeat rows whose boots were not one KV configuration (one_configuration):
        # reported beside the headline, which keeps every row
        same = [abs(r.err_pct) for r in mine if r.kind.startswith("KV pool") and r.err_pct is not None
                and "not one KV configuration" not in r.what]
        decided = [r for r in mine if r.verdict_ok is not None]
        out[split] = {
            "threads": len([t for t in threads if t["split"] == split]) if split != "seed" else 1,
            "pool_rows": len(pool),
            "pool_err_median_pct": round(statistics.median(pool), 2) if pool else None,
            "pool_err_max_pct": round(max(pool), 2) if pool else None,
            "pool_rows_one_configuration": len(same),
            "pool_err_median_pct_one_configuration": round(statistics.median(same), 2) if same else None,
            "verdicts_decided": len(decided),
            "verdicts_right": sum(1 for r in decided if r.verdict_ok),
            "too_close_to_call": sum(1 for r in mine if r.predicted_verdict == "too close to call"),
        }
    return out


def table(rows: list[Row]) -> str:
    head = ("| split | thread | term | case | logged | predicted | err % | err GiB | logged verdict "
            "| predicted verdict |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        cells = [r.split, r.thread, r.kind, r.what, r.logged, r.predicted, r.err_pct, r.err_gib,
                 r.logged_verdict or "", r.predicted_verdict or ""]
        lines.append("| " + " | ".join("" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    threads = load_threads()
    rows = run(threads)
    summ = summary(rows, threads)
    OUT.mkdir(exist_ok=True)
    (OUT / "gb10_public.json").write_text(json.dumps({"summary": summ, "fitted": fit(threads),
                                                      "rows": [asdict(r) for r in rows]}, indent=1))
    text = "# GB10 terms against public startup logs\n\n" + json.dumps(summ, indent=1) + "\n\n" + table(rows)
    (OUT / "gb10_public.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
