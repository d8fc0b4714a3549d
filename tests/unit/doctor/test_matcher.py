"""The matcher's behaviour: ranking, numbers, versions, and input that must not change findings."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from forklift.doctor import Matcher, Rule, diagnose, diagnose_report, iter_binary, kv_advice, version_applies
from forklift.doctor.lines import MAX_LINE

from .conftest import DATA

EX = DATA / "excerpts"


def _lines(name: str) -> list[str]:
    return (EX / f"{name}.log").read_text(errors="replace").splitlines()


def test_kv_numbers_are_parsed_from_the_vllm_message() -> None:
    top = diagnose(_lines("tpu-inference-223-kv-cache"))[0]
    assert top.facts["max_seq_len"] == "131072"
    assert top.facts["needed_gib"] == "16.00"
    assert top.facts["available_gib"] == "0.71"
    assert top.facts["estimated_max_len"] == "5632"
    assert "5632" in top.fix and "0.71 GiB" in top.cause
    assert top.advice[0].startswith("serve.max_model_len: 5120")
    assert "still 7.29 GiB short" in top.advice[1]


def test_kv_numbers_are_parsed_from_the_seed_summary() -> None:
    top = diagnose(_lines("seed000-kv-squeeze"))[0]
    assert (top.facts["available_gib"], top.facts["needed_gib"], top.facts["context"]) == ("0.16", "2.81", "32K")
    assert "0.16 GiB" in top.cause and "2.81 GiB" in top.cause


def test_kv_advice_skips_what_the_recipe_already_does() -> None:
    facts = {"needed_gib": "2.0", "available_gib": "1.5", "max_seq_len": "8192"}
    plain = kv_advice(facts)
    assert any("kv_cache_dtype: fp8" in a and "fits" in a for a in plain)
    assert any(a.startswith("serve.max_model_len: 6144") for a in plain)
    done = kv_advice(facts, {"kv_cache_dtype": "fp8", "enforce_eager": True})
    assert not any("kv_cache_dtype" in a or "enforce_eager" in a for a in done)


def test_specific_rule_outranks_and_supersedes_the_generic_one() -> None:
    findings = diagnose(_lines("vllm-7593-graph-oom"))
    assert findings[0].rule == "cuda-graph-capture-oom"
    generic = [f for f in findings if f.rule == "cuda-oom-generic"]
    assert generic and generic[0].superseded_by == "cuda-graph-capture-oom"
    assert findings.index(generic[0]) > 0


def test_ordered_rule_needs_its_order() -> None:
    lines = _lines("vllm-7593-graph-oom")
    oom = [x for x in lines if "OutOfMemoryError" in x]
    rest = [x for x in lines if "OutOfMemoryError" not in x]
    reordered = diagnose(oom + rest)
    assert "cuda-graph-capture-oom" not in {f.rule for f in reordered}


def test_none_pattern_excludes_a_rule() -> None:
    rules = {f.rule for f in diagnose(_lines("vllm-7593-graph-oom") + ["Loading model weights took 2 GB"])}
    assert "cuda-oom-weights-load" not in rules


def test_speculative_context_changes_the_category() -> None:
    plain = diagnose(_lines("vllm-52761-pp-unsupported-model"))[0]
    spec = diagnose(_lines("vllm-52069-spec-pp"))[0]
    assert plain.category == "unsupported_quantization_or_arch"
    assert spec.category == "speculative_decoding_incompatible"


def test_info_findings_rank_below_errors() -> None:
    lines = _lines("engine-notes-shm-broadcast") + _lines("vllm-13608-undefined-symbol")
    ranked = [f.severity for f in diagnose(lines) if f.superseded_by is None]
    assert ranked == ["error", "info"]


@pytest.mark.parametrize(("spec", "version", "expected"), [
    (">=0.6", "0.32.0", True), (">=0.6", "0.5.4", False), ("<0.7", "0.6.3.post1", True),
    (">=0.6,<0.30", "0.30.0", False), (">=0.6", None, None), (None, "0.32.0", None), (">=0.6", "garbage", None),
])
def test_version_applies(spec: str | None, version: str | None, expected: bool | None) -> None:
    assert version_applies(spec, version) is expected


def test_outside_known_versions_lowers_confidence() -> None:
    lines = _lines("vllm-10517-kv-cache-legacy")
    inside = diagnose(lines, vllm_version="0.6.4")[0]
    outside = diagnose(lines, vllm_version="0.32.0")[0]
    assert inside.rule == outside.rule == "kv-cache-legacy-max-seq-len"
    assert outside.confidence == pytest.approx(inside.confidence / 2)


def test_ansi_and_carriage_returns_give_the_same_findings() -> None:
    plain = _lines("vllm-16707-nccl-system-error")
    noisy = ["\x1b[1;36m" + x + "\x1b[0m" for x in plain]
    noisy.insert(1, "Loading safetensors checkpoint shards:  10%\rLoading safetensors checkpoint shards:  90%\r")
    assert [f.rule for f in diagnose(noisy)] == [f.rule for f in diagnose(plain)]
    assert "\x1b" not in "".join(diagnose(noisy)[0].lines)


def test_caret_escaped_ansi_as_pasted_in_issues_is_removed() -> None:
    findings = diagnose(["^[[1;36m(EngineCore_DP0 pid=6444)^[[0;0m ERROR ValueError: No available memory for the "
                         "cache blocks."])
    assert findings[0].lines[0].startswith("(EngineCore_DP0")


def test_mixed_ranks_keep_every_rank_finding() -> None:
    rank0 = [f"(rank 0) {x}" for x in _lines("vllm-19670-tcpstore-timeout")]
    rank1 = [f"(rank 1) {x}" for x in _lines("vllm-16707-nccl-system-error")]
    mixed = [x for pair in zip(rank0, rank1, strict=False) for x in pair] + rank1[len(rank0):]
    rules = {f.rule for f in diagnose(mixed)}
    assert {"tcpstore-connect-timeout", "nccl-unhandled-system-error"} <= rules


def test_binary_garbage_does_not_crash_and_keeps_findings() -> None:
    blob = os.urandom(200_000).replace(b"\n", b"\x00")
    text = (EX / "vllm-13608-undefined-symbol.log").read_bytes()
    stream = io.BytesIO(blob + b"\n" + text + b"\xff\xfe\n" + blob)
    findings = diagnose(iter_binary(stream))
    assert findings[0].rule == "vllm-c-undefined-symbol"


def test_a_huge_line_is_cut_and_the_next_line_still_read() -> None:
    huge = b"x" * (5 * 1024 * 1024)
    stream = io.BytesIO(huge + b"\n" + b"RuntimeError: Failed to infer device type\n")
    lines = list(iter_binary(stream))
    assert max(len(x) for x in lines) <= MAX_LINE
    assert lines[-1] == "RuntimeError: Failed to infer device type"


def test_a_long_log_is_streamed(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    filler = b"INFO 11-30 04:09:00 [core.py:1] step done, nothing to see\n" * 20_000
    with path.open("wb") as fh:
        for _ in range(5):
            fh.write(filler)
        fh.write((EX / "vllm-4327-fp8-capability.log").read_bytes())
    with path.open("rb") as fh:
        report = diagnose_report(iter_binary(fh))
    assert report.lines_read > 100_000
    assert report.findings[0].rule == "quantization-min-capability"


def test_nothing_matched_keeps_the_last_error_lines() -> None:
    report = diagnose_report(["INFO all good", "ERROR something nobody has seen", "Traceback (most recent call last):"])
    assert report.findings == []
    assert report.error_tail == ["ERROR something nobody has seen", "Traceback (most recent call last):"]


def test_custom_rules_run_through_the_same_matcher() -> None:
    rule = Rule.model_validate({
        "id": "custom", "title": "t", "category": "patch_drift", "confidence": 0.5,
        "match": {"all": ["frobnicate (?P<what>\\w+)"]}, "cause": "bad {what}", "fix": "f", "references": ["x"],
    })
    report = Matcher([rule]).run(["please frobnicate widgets"])
    assert [(f.rule, f.cause) for f in report.findings] == [("custom", "bad widgets")]
