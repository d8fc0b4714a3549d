"""ON THE DEVICE (after scripts/gpu/device_stage.sh, with $HOME/stage/env.sh sourced): ``forklift tune``'s
library on the llama8b-like dummy-weight recipe (vLLM 0.26.0, one H200), two workloads benched against every
candidate start (rag first: the candidates come from it; then chat), 32 users, the SLO stated before any run.

    python3 scripts/gpu/tune/run_tune.py search BUDGET_MIN            # the plan's candidates, budgeted search
    python3 scripts/gpu/tune/run_tune.py confirm BUDGET_MIN "SETS"    # baseline and SETS restarted A/B/A/B
    python3 scripts/gpu/tune/run_tune.py summarize BUDGET_MIN         # long documents, tight TPOT (below)
    python3 scripts/gpu/tune/run_tune.py summarize-confirm BUDGET_MIN "SETS"  # one more start of each, same SLO

``summarize``: the ``summarize`` class at size 4 (one ~3,700-token report per request, 512 distinct requests so
none repeats within a run; ~70-token summaries), 32 users, SLO ``SLO_SUMMARIZE`` stated before any run: the
summary (~70 tokens) renders within ~2 s once it starts (TPOT p95 30 ms, 33 tokens/s per stream) and its first
token comes within 5 s p95 (the user has just submitted a long report). vLLM's H200 defaults (max_num_seqs 1024,
max_num_batched_tokens 8192) run all 32 streams at once, so every stream's decode is stalled by ~31 other ~0.1 s
prefills over its ~70 tokens (~40-50 ms TPOT); the plan's top candidate caps the streams in flight. One candidate
(the plan's first), one 15-second run a start, one A/B round. ``summarize-confirm``: the same workload and SLO,
the baseline and SETS started once each (no search), so their starts join the ``summarize`` run's
(``benchmarks.tune_vs_defaults`` pools the two files by candidate).

Writes $OUT/tune-PHASE.json (the whole result), tune-PHASE.md and pareto-PHASE.html.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from forklift.tune import flow

RECIPE = "scripts/gpu/recipes/llama8b-bf16.yaml"
SLO = "ttft_p95=1000,tpot_p95=20"
"""Interactive: first token within 1 s and 50 tokens/s per stream at p95 (stated before measuring)."""
SLO_SUMMARIZE = "ttft_p95=5000,tpot_p95=30"
"""Stated 2026-12-02 before the summarize run (see the module's doc)."""


def main() -> int:
    phase, budget = sys.argv[1], float(sys.argv[2])
    out = Path(os.environ.get("OUT", "/tmp/out"))
    folder = Path("/tmp/tune") / phase
    shutil.rmtree(folder, ignore_errors=True)
    cands = tuple(sys.argv[3:]) if phase in ("confirm", "summarize-confirm") else ()
    if phase in ("summarize", "summarize-confirm"):
        req = flow.Request(RECIPE, ("summarize",), SLO_SUMMARIZE, budget, (), 32, 4.0, 15.0, 1, 1,
                           1 if phase == "summarize" else 0, False, False, folder, f"tune-{phase}", requests=512,
                           candidates=cands)
    else:
        req = flow.Request(RECIPE, ("rag", "chat"), SLO, budget, (), 32, 2.0, 15.0 if cands else 20.0,
                           1 if cands else 2, 3, 1 if cands else 0, False, False, folder, f"tune-{phase}",
                           candidates=cands)
    t0 = time.time()
    result = flow.run(req, on_event=lambda text: print(f"[{time.time() - t0:6.0f}s] {text}", flush=True))
    data = result.to_json() | {"machine": "nvidia-h200 (lent), vLLM 0.26.0, dummy weights", "phase": phase}
    (out / f"tune-{phase}.json").write_text(json.dumps(data, indent=2))
    shutil.copy(folder / "tune.md", out / f"tune-{phase}.md")
    shutil.copy(folder / "pareto.html", out / f"pareto-{phase}.html")
    print((folder / "tune.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
