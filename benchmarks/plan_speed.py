"""Benchmark (not a test): how long `forklift.plan.make` takes for every bundled model config.

Plans each bundled config on a fitting layout (advice included), several times, and writes
bench-results/plan_speed.json. The issue's bar: under 0.3 s per plan.

    python benchmarks/plan_speed.py
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from forklift.model import configs_index
from forklift.plan import make
from forklift.recipe.load import validate

REPEATS = 5
LIMIT_S = 0.3
# (hardware, nodes, tp, pp) per bundled config: a layout that holds the weights
LAYOUTS: dict[str, tuple[str, int, int, int]] = {
    "glm-4.7": ("h200", 1, 8, 1),
    "glm-4.7-nvfp4": ("gb10", 2, 2, 1),
    "glm-4.5-air": ("h200", 1, 2, 1),
    "glm-5.1": ("h200", 2, 8, 2),
    "glm-5.2": ("h200", 2, 8, 2),
    "glm-5.2-nvfp4": ("gb10", 4, 4, 1),
    "glm-5.2-nvfp4-reap-469b": ("gb10", 3, 1, 3),
    "deepseek-v3": ("h200", 1, 8, 1),
    "qwen3-235b-a22b": ("h200", 1, 4, 1),
    "gpt-oss-120b": ("h100", 1, 1, 1),
    "llama-3.1-405b": ("h200", 1, 8, 1),
}


def main() -> int:
    results: list[dict[str, Any]] = []
    for name in sorted(configs_index.bundled_configs()):
        hw, nodes, tp, pp = LAYOUTS.get(name, ("h200", 1, 8, 1))
        recipe = validate({
            "name": f"bench-{name}",
            "model": {"source": name, "config": name},
            "nodes": [{"host": f"n{i}", "hardware": hw} for i in range(nodes)],
            "parallel": {"tp": tp, "pp": pp},
            "serve": {"max_model_len": 32768, "kv_cache_dtype": "fp8"},
        })
        times = []
        plan = None
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            plan = make(recipe)
            times.append(time.perf_counter() - t0)
        assert plan is not None
        results.append({"config": name, "hardware": hw, "nodes": nodes, "tp": tp, "pp": pp,
                        "first_s": round(times[0], 4), "median_s": round(statistics.median(times), 4),
                        "max_s": round(max(times), 4), "fits": plan.fits, "kv_tokens": plan.kv_tokens,
                        "advice_steps": len(plan.advice)})
        print(f"{name:26s} {hw:5s} tp={tp} pp={pp}  first {times[0] * 1000:6.1f} ms  "
              f"median {statistics.median(times) * 1000:6.1f} ms  fits={plan.fits}")
    worst = max(r["max_s"] for r in results)
    out = Path("bench-results")
    out.mkdir(exist_ok=True)
    (out / "plan_speed.json").write_text(json.dumps(
        {"limit_s": LIMIT_S, "worst_s": worst, "under_limit": worst < LIMIT_S, "results": results}, indent=2))
    print(f"worst {worst * 1000:.1f} ms (limit {LIMIT_S * 1000:.0f} ms): {'OK' if worst < LIMIT_S else 'TOO SLOW'}")
    return 0 if worst < LIMIT_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
