"""Benchmark (not a test): the planner on every quantized H200 startup log, per quantization method.

Each point of tests/data/calibration (points-h200.json, scripts/gpu/grid/points.json) whose checkpoint is quantized
(or that quantizes at load: serve.quantization) is planned from its config and settings alone, as
benchmarks/plan_accuracy.py does, and compared with what vLLM logged: the weights ("Model loading took"), the KV pool
("Available KV cache memory"), and the verdict. Rows are grouped by vLLM's method and the checkpoint layout, with the
kernel vLLM picked for the linear layers on the H200 (forklift/model/quant_layouts.yaml) and what that kernel keeps
beyond the checkpoint's bytes. Calibration and held-out points are marked (constants may be chosen on calib only).

Writes bench-results/quant_methods.json and bench-results/quant_methods.md.

    python -m benchmarks.quant_methods
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import plan_accuracy as pa
from forklift.model.load import spec_for
from forklift.model.quant import loaded_scheme, online_scheme, scheme_from_config
from forklift.model.tensors import model_tensors
from forklift.plan import make, rules
from forklift.plan.calibrate import parse_log
from forklift.plan.core import context
from forklift.plan.make import deployment_of
from forklift.plan.quant_layout import StoredLayout

OUT = pa.OUT
GIB = 2**30


@dataclass
class Row:
    id: str
    set: str
    model: str
    method: str
    layout: str
    kernels: str
    kernel_extra_gib: float
    logged_weights_gib: float | None
    planned_weights_gib: float
    weights_err_gib: float | None
    logged_kv_gib: float | None
    planned_kv_gib: float
    kv_err_pct: float | None
    logged_fits: bool | None
    planned_fits: bool
    verdict: str
    verdict_ok: bool | None
    kv_interval_gib: tuple[float, float] | None = None
    in_interval: bool | None = None
    weights_band: str = ""


def _config(point: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(pa.config_path(point["model"]).read_text())
    return data


def quantized(point: dict[str, Any]) -> bool:
    return bool(_config(point).get("quantization_config") or (point.get("serve") or {}).get("quantization"))


def _kernels(point: dict[str, Any], version: str, tmp: Path) -> tuple[str, float]:
    """The kernels holding the quantized layers on the point's GPU, and their bytes beyond the checkpoint's."""
    deployment = deployment_of(pa.recipe_for(point, tmp))
    src = spec_for(deployment.recipe.model)
    spec = src.spec
    ctx = context(deployment, src, rules.rules_for(version))
    scheme = loaded_scheme(online_scheme(deployment.recipe.serve.quantization, spec.quant), dummy=True)
    tensors = model_tensors(spec)
    layout = StoredLayout(spec, scheme, tensors, tp=ctx.st.tp, capability=ctx.st.capability,
                          act_bytes=float(ctx.st.dtype_bytes))
    extra = 0.0
    used: dict[str, float] = {}
    for t in tensors:
        if t.role == "experts" or not scheme.quantized(t.module, linear=t.linear, role=t.role):
            continue
        found = layout.kernel_for(t)
        if found is not None:
            used[found[0].name] = used.get(found[0].name, 0.0) + found[1].n / found[1].n_fused
        got = layout.tensor_bytes(t)
        if got is not None:
            ways = {"col": ctx.st.tp, "row": ctx.st.tp, "kv": min(ctx.st.tp, spec.num_kv_heads)}.get(t.split, 1)
            extra += got - t.numel / ways * scheme.linear_bytes
    names = ", ".join(f"{k} ({round(n)})" for k, n in sorted(used.items(), key=lambda kv: -kv[1]))
    return names or "-", round(extra / GIB, 3)


def evaluate(point: dict[str, Any], log: Path, version: str, tmp: Path) -> Row:
    facts = parse_log(log.read_text(errors="replace"))
    ver = facts.vllm_version or version
    plan = make(pa.recipe_for(point, tmp), vllm_version=ver, compile_cache=facts.compile_cache or "cold")
    scheme = online_scheme((point.get("serve") or {}).get("quantization"),
                           scheme_from_config(_config(point).get("quantization_config")))
    kernels, extra = _kernels(point, ver, tmp)
    planned_kv = min(r.kv_pool_gib for r in plan.ranks)
    weights = plan.ranks[0].weights_gib
    logged_w = facts.weights_gib
    return Row(
        id=point["id"], set=point["set"], model=point["model"], method=scheme.method,
        layout=f"{scheme.linear_format}{' act-order' if scheme.act_order else ''}", kernels=kernels,
        kernel_extra_gib=extra, logged_weights_gib=logged_w, planned_weights_gib=round(weights, 3),
        weights_err_gib=None if logged_w is None else round(weights - logged_w, 3),
        logged_kv_gib=facts.available_kv_gib, planned_kv_gib=round(planned_kv, 3),
        kv_err_pct=pa._err(planned_kv, facts.available_kv_gib), logged_fits=facts.fits, planned_fits=plan.fits,
        verdict=plan.verdict, verdict_ok=None if facts.fits is None else facts.fits == plan.fits,
        kv_interval_gib=plan.interval.kv_pool_gib if plan.interval else None,
        in_interval=None if plan.interval is None or facts.available_kv_gib is None
        else plan.interval.kv_pool_gib[0] - 0.005 <= facts.available_kv_gib <= plan.interval.kv_pool_gib[1] + 0.005,
        weights_band=next((f"+/-{b.band_gib:.3f} {b.basis}" for b in plan.interval.terms if b.term == "weights"), "")
        if plan.interval else "")


def run() -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for point, log, version in pa.points():
            if log is not None and quantized(point):
                rows.append(evaluate(point, log, version, Path(tmp)))
    return rows


def summary(rows: list[Row]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for method in sorted({r.method for r in rows}):
        sel = [r for r in rows if r.method == method]
        kv = [abs(r.kv_err_pct) for r in sel if r.kv_err_pct is not None]
        held = [abs(r.kv_err_pct) for r in sel if r.kv_err_pct is not None and r.set == "heldout"]
        w = [abs(r.weights_err_gib) for r in sel if r.weights_err_gib is not None]
        verdicts = [r.verdict_ok for r in sel if r.verdict_ok is not None]
        inside = [r.in_interval for r in sel if r.in_interval is not None]
        out[method] = {
            "points": len(sel), "heldout": sum(r.set == "heldout" for r in sel),
            "kv_err_median_pct": round(statistics.median(kv), 2) if kv else None,
            "kv_err_max_pct": round(max(kv), 2) if kv else None,
            "heldout_kv_err_max_pct": round(max(held), 2) if held else None,
            "weights_abs_err_max_gib": round(max(w), 3) if w else None,
            "verdicts_right": f"{sum(verdicts)}/{len(verdicts)}",
            "logged_pool_inside_interval": f"{sum(inside)}/{len(inside)}",
            "too_close_to_call": sum(r.verdict == "too close to call" for r in sel),
        }
    return out


def table(rows: list[Row], summ: dict[str, dict[str, Any]]) -> str:
    lines = ["| method | points (held-out) | KV err median % | KV err max % | held-out max % | weights err max GiB "
             "| verdicts | logged pool in interval | too close |", "|" + "---|" * 9]
    for method, s in summ.items():
        lines.append(f"| {method} | {s['points']} ({s['heldout']}) | {s['kv_err_median_pct']} | {s['kv_err_max_pct']} "
                     f"| {s['heldout_kv_err_max_pct']} | {s['weights_abs_err_max_gib']} | {s['verdicts_right']} "
                     f"| {s['logged_pool_inside_interval']} | {s['too_close_to_call']} |")
    lines += ["", "| point | set | model | method | layout | kernels on the GPU (layers) | kernel extra GiB | weights "
              "logged / planned (err) | weights band | KV logged / planned (err %) | KV interval "
              "| fits logged / planned | verdict |", "|" + "---|" * 13]
    for r in rows:
        lines.append(f"| {r.id} | {r.set} | {r.model} | {r.method} | {r.layout} | {r.kernels} | {r.kernel_extra_gib} "
                     f"| {r.logged_weights_gib} / {r.planned_weights_gib} ({r.weights_err_gib}) | {r.weights_band} "
                     f"| {r.logged_kv_gib} / {r.planned_kv_gib} ({r.kv_err_pct}) | {pa._span(r.kv_interval_gib)} "
                     f"| {r.logged_fits} / {r.planned_fits} | {r.verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    rows = run()
    summ = summary(rows)
    OUT.mkdir(exist_ok=True)
    (OUT / "quant_methods.json").write_text(json.dumps({"summary": summ, "rows": [asdict(r) for r in rows]},
                                                       indent=2))
    text = table(rows, summ)
    (OUT / "quant_methods.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
