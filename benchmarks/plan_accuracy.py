"""Benchmark (not a test): the planner against every real vLLM startup log in tests/data/calibration.

Each point (tests/data/calibration/points-h200.json, scripts/gpu/grid/points.json) is planned from its config and
settings alone and compared with what vLLM logged: the KV pool ("Available KV cache memory"), the KV tokens
("GPU KV cache size"), the block size, and the verdict (started, or stopped with a memory error). Calibration and
held-out points are summarised separately: constants may be chosen on calib points only.

Writes bench-results/plan_accuracy.json and bench-results/plan_accuracy.md (the per-point table).

    python -m benchmarks.plan_accuracy          # the table and the calib / held-out summary
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from forklift.plan import make
from forklift.plan.calibrate import LogFacts, parse_log
from forklift.plan.result import Plan
from forklift.recipe.load import validate
from forklift.recipe.schema import Recipe

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "calibration"
POINT_FILES = {DATA / "points-h200.json": DATA, ROOT / "scripts" / "gpu" / "grid" / "points.json": DATA / "h200-grid"}
CONFIG_DIRS = [DATA, ROOT / "scripts" / "gpu" / "grid" / "models", ROOT / "scripts" / "gpu" / "models"]
OUT = ROOT / "bench-results"


@dataclass
class Row:
    id: str
    set: str
    model: str
    settings: str
    logged_kv_gib: float | None
    planned_kv_gib: float
    kv_err_pct: float | None
    logged_tokens: int | None
    planned_tokens: int
    tokens_err_pct: float | None
    logged_fits: bool | None
    planned_fits: bool
    verdict_ok: bool | None
    logged_block: int | None
    planned_block: int
    note: str = ""
    compile_cache: str | None = None
    seen_by_fix: bool = False
    """A held-out point read while deriving a fix (points.json ``seen_by_fix``): no longer out of sample."""
    verdict: str = ""
    kv_interval_gib: tuple[float, float] | None = None
    margin_interval_gib: tuple[float, float] | None = None
    in_interval: bool | None = None
    """Whether the logged pool lies inside the plan's interval."""


def points() -> list[tuple[dict[str, Any], Path | None, str]]:
    """(point, its log if present, vLLM version) for every point of every points file."""
    out = []
    for file, log_dir in POINT_FILES.items():
        if not file.is_file():
            continue
        data = json.loads(file.read_text())
        for p in data["points"]:
            name = p.get("log") or f"{p['id']}-{p['model']}.log"
            log = log_dir / name
            out.append((p, log if log.is_file() else None, str(data.get("vllm_version", "0.26.0"))))
    return out


def config_path(model: str) -> Path:
    for folder in CONFIG_DIRS:
        path = folder / f"{model}.config.json"
        if path.is_file():
            return path
    raise FileNotFoundError(f"no config for {model} in {', '.join(map(str, CONFIG_DIRS))}")


def recipe_for(point: dict[str, Any], tmp: Path) -> Recipe:
    """The recipe the point ran: its config as a dummy-weight model, one node per its run, its settings."""
    model = tmp / point["id"]
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(config_path(point["model"]).read_text())
    nodes = int(point.get("nodes", 1))
    return validate({
        "model": {"source": str(model), "load_format": "dummy"},
        "nodes": [{"host": f"node{i}", "hardware": point.get("hardware", "h200")} for i in range(nodes)],
        "parallel": {"tp": int(point.get("tp", 1)), "pp": int(point.get("pp", 1))},
        "serve": point.get("serve", {}),
    })


def _err(planned: float, logged: float | None) -> float | None:
    return None if not logged else round(100 * (planned - logged) / logged, 2)


def evaluate(point: dict[str, Any], log: Path, version: str, tmp: Path) -> Row:
    facts: LogFacts = parse_log(log.read_text(errors="replace"))
    plan = make(recipe_for(point, tmp), vllm_version=facts.vllm_version or version,
                compile_cache=facts.compile_cache or "cold")  # the start's torch.compile cache, as its log says
    planned_kv = min(r.kv_pool_gib for r in plan.ranks)
    fits = facts.fits
    settings = ", ".join(f"{k}={v}" for k, v in {**point.get("serve", {}), "tp": point.get("tp", 1),
                                                  "pp": point.get("pp", 1)}.items())
    return Row(
        id=point["id"], set=point["set"], model=point["model"], settings=settings,
        logged_kv_gib=facts.available_kv_gib, planned_kv_gib=round(planned_kv, 2),
        kv_err_pct=_err(planned_kv, facts.available_kv_gib), logged_tokens=facts.kv_tokens,
        planned_tokens=plan.kv_tokens, tokens_err_pct=_err(plan.kv_tokens, facts.kv_tokens) if fits else None,
        logged_fits=fits, planned_fits=plan.fits, verdict_ok=None if fits is None else fits == plan.fits,
        logged_block=facts.block_size, planned_block=plan.block_size, compile_cache=facts.compile_cache,
        seen_by_fix=bool(point.get("seen_by_fix")), verdict=plan.verdict,
        kv_interval_gib=plan.interval.kv_pool_gib if plan.interval else None,
        margin_interval_gib=plan.interval.margin_gib if plan.interval else None,
        in_interval=None if plan.interval is None or facts.available_kv_gib is None
        else plan.interval.kv_pool_gib[0] - 0.005 <= facts.available_kv_gib <= plan.interval.kv_pool_gib[1] + 0.005,
        note=(facts.error or "") + (f" max_len {facts.max_len_estimate} vs {plan.largest_max_model_len}"
                                    if facts.max_len_estimate else ""))


def term_keys(plan: Plan) -> dict[str, str]:
    """The key each term's band is verified under (forklift.plan.interval): weights by quantization method,
    activation and CUDA graphs by model family, non-torch by layout."""
    return {b.term: b.key for b in (plan.interval.terms if plan.interval else [])}


def term_errors(set_name: str = "heldout") -> dict[str, dict[str, dict[str, Any]]]:
    """Per term and key, the largest error of the planned term against the logged one over the points of one set
    (relative to the logged term; non-torch in GiB): what plan/data/uncertainty.yaml's verified bands hold."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for point, log, version in points():
            if log is None or point["set"] != set_name:
                continue
            facts = parse_log(log.read_text(errors="replace"))
            plan = make(recipe_for(point, Path(tmp)), vllm_version=facts.vllm_version or version,
                        compile_cache=facts.compile_cache or "cold")
            rank = min(plan.ranks, key=lambda r: r.kv_pool_gib)
            keys = term_keys(plan)
            found = {
                "weights": _rel(rank.weights_gib, facts.weights_gib),
                "activation": _rel(rank.activation_gib, facts.activation_gib),
                "non_torch": None if facts.non_torch_gib is None else abs(rank.non_torch_gib - facts.non_torch_gib),
                "cudagraph": _rel(rank.cudagraph_gib, facts.cudagraph_estimate_gib) if rank.cudagraph_subtracted
                else None,
            }
            for term, err in found.items():
                if err is None or term not in keys:
                    continue
                entry = out.setdefault(term, {}).setdefault(keys[term], {"max": 0.0, "point": "", "points": 0})
                entry["points"] += 1
                if err >= entry["max"]:
                    entry.update(max=round(err, 4), point=point["id"])
    return out


def _rel(planned: float, logged: float | None) -> float | None:
    return None if not logged else abs(planned - logged) / logged


def summary(rows: list[Row]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    groups = {"calib": [r for r in rows if r.set == "calib"], "heldout": [r for r in rows if r.set == "heldout"],
              "heldout_unseen": [r for r in rows if r.set == "heldout" and not r.seen_by_fix]}
    for name, sel in groups.items():
        errs = [abs(r.kv_err_pct) for r in sel if r.kv_err_pct is not None]
        verdicts = [r.verdict_ok for r in sel if r.verdict_ok is not None]
        decided = [r.logged_fits == (r.verdict == "fits") for r in sel
                   if r.logged_fits is not None and r.verdict in ("fits", "does not fit")]
        inside = [r.in_interval for r in sel if r.in_interval is not None]
        out[name] = {"points": len(sel), "kv_err_median_pct": round(statistics.median(errs), 2) if errs else None,
                     "kv_err_max_pct": round(max(errs), 2) if errs else None,
                     "verdicts_right": f"{sum(verdicts)}/{len(verdicts)}",
                     "decided_verdicts_right": f"{sum(decided)}/{len(decided)}",
                     "too_close_to_call": sum(r.verdict == "too close to call" for r in sel),
                     "fits_inside_interval": sum(r.verdict == "fits" and r.margin_interval_gib is not None
                                                 and r.margin_interval_gib[0] <= 0 for r in sel),
                     "logged_pool_inside_interval": f"{sum(inside)}/{len(inside)}"}
    return out


def table(rows: list[Row]) -> str:
    head = ("| point | set | model | settings | KV GiB logged | planned | err % | tokens logged | planned | err % "
            "| fits logged / planned | verdict | KV interval | block logged / planned | compile cache | note |")
    lines = [head, "|" + "---|" * 16]
    for r in rows:
        lines.append(f"| {r.id} | {r.set} | {r.model} | {r.settings} | {r.logged_kv_gib} | {r.planned_kv_gib} | "
                     f"{r.kv_err_pct} | {r.logged_tokens} | {r.planned_tokens} | {r.tokens_err_pct} | "
                     f"{r.logged_fits} / {r.planned_fits} | {r.verdict} | {_span(r.kv_interval_gib)} | "
                     f"{r.logged_block} / {r.planned_block} | {r.compile_cache} | "
                     f"{r.note} |")
    return "\n".join(lines)


def _span(span: tuple[float, float] | None) -> str:
    return "-" if span is None else f"{span[0]:.2f}..{span[1]:.2f}"


def run() -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    missing: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for point, log, version in points():
            if log is None:
                missing.append(point["id"])
                continue
            rows.append(evaluate(point, log, version, Path(tmp)))
    return rows, missing


def main(argv: list[str] | None = None) -> int:
    rows, missing = run()
    summ = summary(rows)
    OUT.mkdir(exist_ok=True)
    (OUT / "plan_accuracy.json").write_text(json.dumps({"summary": summ, "rows": [asdict(r) for r in rows],
                                                        "points_without_log": missing}, indent=2))
    text = table(rows) + "\n\n" + "\n".join(f"- {k}: {v}" for k, v in summ.items())
    if missing:
        text += f"\n- points without a log yet: {', '.join(missing)}"
    (OUT / "plan_accuracy.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
