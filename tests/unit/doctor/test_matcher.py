"""The exact-signature layer: numbers become facts, order and exclusions hold, versions lower confidence,
custom rules run through the same matcher."""

from __future__ import annotations

import pytest

from forklift.doctor import Matcher, Rule, diagnose, kv_advice, scan_text, version_applies
from forklift.doctor.findings import Finding

from .conftest import DATA

EX = DATA / "excerpts"


def _lines(name: str) -> list[str]:
    return (EX / f"{name}.log").read_text(errors="replace").splitlines()


def _rules(lines: list[str], vllm_version: str | None = None) -> list[Finding]:
    from forklift.doctor.match import default_matcher

    return default_matcher().run(scan_text(lines).lines, vllm_version=vllm_version)


def test_kv_numbers_are_parsed_from_the_vllm_message() -> None:
    top = diagnose(_lines("tpu-inference-223-kv-cache"))[0]
    facts = (top.facts["max_seq_len"], top.facts["needed_gib"], top.facts["available_gib"])
    assert facts == ("131072", "16.00", "0.71")
    assert top.facts["estimated_max_len"] == "5632"
    assert "5632" in top.fix and "0.71 GiB" in top.cause
    assert top.advice[0].startswith("serve.max_model_len: 5120")
    assert "still 7.29 GiB short" in top.advice[1]


def test_kv_numbers_are_parsed_from_the_seed_summary() -> None:
    top = diagnose(_lines("seed000-kv-squeeze"))[0]
    assert (top.facts["available_gib"], top.facts["needed_gib"], top.facts["context"]) == ("0.16", "2.81", "32K")


def test_kv_advice_skips_what_the_recipe_already_does() -> None:
    facts = {"needed_gib": "2.0", "available_gib": "1.5", "max_seq_len": "8192"}
    plain = kv_advice(facts)
    assert any("kv_cache_dtype: fp8" in a and "fits" in a for a in plain)
    done = kv_advice(facts, {"kv_cache_dtype": "fp8", "enforce_eager": True})
    assert not any("kv_cache_dtype" in a or "enforce_eager" in a for a in done)


def test_graph_capture_oom_supersedes_the_generic_oom_only_in_that_order() -> None:
    lines = _lines("vllm-7593-graph-oom")
    found = {f.rule: f for f in _rules(lines)}
    assert "cuda-graph-capture-oom" in found
    assert found["cuda-oom-generic"].superseded_by == "cuda-graph-capture-oom"
    oom = [x for x in lines if "OutOfMemoryError" in x]
    rest = [x for x in lines if "OutOfMemoryError" not in x]
    assert "cuda-graph-capture-oom" not in {f.rule for f in _rules(oom + rest)}


def test_a_none_pattern_excludes_a_rule() -> None:
    lines = _lines("vllm-15182-oom-load-model")
    assert "cuda-oom-weights-load" in {f.rule for f in _rules(lines)}
    assert "cuda-oom-weights-load" not in {f.rule for f in _rules(lines + ["Loading model weights took 2 GB"])}


def test_speculative_context_changes_the_category() -> None:
    assert diagnose(_lines("vllm-52761-pp-unsupported-model"))[0].category == "parallel_layout_invalid"
    assert diagnose(_lines("vllm-52069-spec-pp"))[0].category == "speculative_decoding_incompatible"


@pytest.mark.parametrize(("spec", "version", "expected"), [
    (">=0.6", "0.32.0", True), (">=0.6", "0.5.4", False), ("<0.7", "0.6.3.post1", True),
    (">=0.6,<0.30", "0.30.0", False), (">=0.6", None, None), (None, "0.32.0", None), (">=0.6", "garbage", None),
])
def test_version_applies(spec: str | None, version: str | None, expected: bool | None) -> None:
    assert version_applies(spec, version) is expected


def test_outside_known_versions_halves_the_rules_prior() -> None:
    lines = _lines("vllm-10517-kv-cache-legacy")
    inside = {f.rule: f for f in _rules(lines, "0.6.4")}["kv-cache-legacy-max-seq-len"]
    outside = {f.rule: f for f in _rules(lines, "0.32.0")}["kv-cache-legacy-max-seq-len"]
    assert outside.confidence == pytest.approx(inside.confidence / 2)


def test_ansi_and_carriage_returns_give_the_same_findings() -> None:
    plain = _lines("vllm-16707-nccl-system-error")
    noisy = ["\x1b[1;36m" + x + "\x1b[0m" for x in plain]
    noisy.insert(1, "Loading safetensors checkpoint shards:  10%\rLoading safetensors checkpoint shards:  90%\r")
    plain.insert(1, "Loading safetensors checkpoint shards:  10%\nLoading safetensors checkpoint shards:  90%")
    assert [(f.rule, f.confidence) for f in diagnose(noisy)] == [(f.rule, f.confidence) for f in diagnose(plain)]
    assert "\x1b" not in "".join(diagnose(noisy)[0].lines)


def test_mixed_ranks_keep_every_rank_finding() -> None:
    rank0 = [f"(rank 0) {x}" for x in _lines("vllm-19670-tcpstore-timeout")]
    rank1 = [f"(rank 1) {x}" for x in _lines("vllm-4327-fp8-capability")]
    rules = {f.rule for f in _rules(rank0 + rank1)}
    assert {"tcpstore-connect-timeout", "quantization-min-capability"} <= rules


def test_custom_rules_run_through_the_same_matcher() -> None:
    rule = Rule.model_validate({
        "id": "custom", "title": "t", "category": "patch_drift", "confidence": 0.5,
        "match": {"all": ["frobnicate (?P<what>\\w+)"]}, "cause": "bad {what}", "fix": "f", "references": ["x"],
    })
    found = Matcher([rule]).run(scan_text(["please frobnicate widgets"]).lines)
    assert [(f.rule, f.cause, f.evidence[0].number) for f in found] == [("custom", "bad widgets", 1)]
