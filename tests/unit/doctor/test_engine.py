"""The layers together: rules, the statistical layer, context, calibrated probabilities, CheckResults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forklift.doctor import Context, Source, diagnose, diagnose_sources, scan_bytes, scan_text, to_checks
from forklift.doctor.findings import Report

from .conftest import DATA

EX = DATA / "excerpts"
HEALTHY = sorted(EX.glob("calib-*-healthy.log"))


def _report(text: str, ctx: Context | None = None, **kw: Any) -> Report:
    return diagnose_sources([Source("t", scan_text([text]))], ctx, **kw)


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: p.name)
def test_healthy_logs_give_no_finding(path: Path) -> None:
    report = diagnose_sources([Source(path.name, scan_bytes(path.read_bytes(), path.name))])
    assert report.findings == []
    checks = to_checks(report)
    assert [c.status for c in checks] == ["ok"]


def test_probabilities_are_ranked_and_sum_to_at_most_one() -> None:
    report = _report((EX / "vllm-16707-nccl-system-error.log").read_text())
    ps = [f.confidence for f in report.findings if f.severity != "info"]
    assert ps == sorted(ps, reverse=True)
    assert 0 < sum(ps) <= 1.0 + 1e-9


def test_a_specific_signature_outranks_the_generic_wrapper() -> None:
    text = (EX / "engine-notes-mla-head-dim.log").read_text()
    top = _report(text).findings[0]
    assert top.rule == "mla-head-dim-unsupported"
    generic = [f for f in diagnose(text.splitlines()) if f.rule == "engine-worker-died"]
    assert all(f.superseded_by for f in generic)


def test_a_rule_finding_carries_its_fix_key_and_evidence_lines() -> None:
    top = _report("TypeError: KVCacheScaleParameter.weight_loader() takes 2 positional arguments but 3 were given").top
    assert top is not None and top.layer == "rule" and top.patch == "kv-scale-loader-args" and top.key == "patches"
    assert top.evidence[0].number == 1 and "weight_loader" in top.evidence[0].text


def test_an_unseen_wording_is_named_by_the_statistical_layer_with_evidence() -> None:
    text = ("after we updated the kernel the RoCE link between the two sparks stopped working, registering memory "
            "with the NIC fails and NCCL gives up during init\n")
    report = _report(text, use_model=True)
    assert report.findings and report.findings[0].layer == "model"
    assert report.findings[0].category == "rdma_ib_error"
    assert report.findings[0].evidence and 0.0 < report.findings[0].confidence <= 1.0


def test_low_probability_means_unsure_and_candidates_say_verify_first() -> None:
    report = _report((EX / "vllm-16707-nccl-system-error.log").read_text(), threshold=0.999)
    assert report.unsure and len(report.findings) >= 2
    checks = to_checks(report)
    assert all(c.status == "warn" for c in checks)
    assert all(c.fix and c.fix.startswith("Not sure; verify first") for c in checks)
    assert any(c.evidence for c in checks)


def test_a_confident_report_is_one_fail_with_the_fix() -> None:
    report = _report((EX / "tpu-inference-223-kv-cache.log").read_text())
    checks = to_checks(report)
    assert checks[0].status == "fail" and checks[0].details["category"] == "kv_cache_insufficient"
    assert "serve.max_model_len" in (checks[0].fix or "")
    assert checks[0].details["probability"] >= report.threshold


def test_context_backend_native_lowers_ray_categories() -> None:
    text = "ERROR the engine died\nworker lost, the raylet stopped responding and the actor is gone\n"
    plain = {f.category: f.confidence for f in _report(text).findings}
    native = {f.category: f.confidence for f in _report(text, Context(backend="native")).findings}
    ray = [c for c in plain if c.startswith("ray_")]
    assert ray, "the text reads as a Ray failure without context"
    assert all(native.get(c, 0.0) < plain[c] for c in ray)


def test_patch_context_says_apply_it_or_that_it_no_longer_fits() -> None:
    line = "TypeError: KVCacheScaleParameter.weight_loader() takes 2 positional arguments but 3 were given"
    missing = _report(line, Context(patches_wanted=())).top
    assert missing is not None and "patches: [kv-scale-loader-args]" in missing.fix
    applied = _report(line, Context(patches_applied=("kv-scale-loader-args",))).top
    assert applied is not None and applied.category == "patch_drift"
    assert "forklift patch status kv-scale-loader-args" in applied.fix


def test_findings_from_several_sources_name_the_host_and_the_source_lines() -> None:
    log = scan_bytes(b"INFO starting\nERROR something odd\n", "node-a rank 0 log")
    oom = b"[ 9341.552] Out of memory: Killed process 311 (python3) total-vm:141233212kB\n"
    dmesg = scan_bytes(oom, "node-b dmesg")
    report = diagnose_sources([Source("node-a rank 0 log", log, host="node-a"),
                               Source("node-b dmesg", dmesg, host="node-b")])
    top = report.findings[0]
    assert top.category == "oom_host_unified_memory" and top.host == "node-b"
    assert top.evidence[0].source == "node-b dmesg"


def test_phase_is_read_from_the_log() -> None:
    text = "INFO Starting to load model x\nINFO Model loading took 1.2 GiB\nINFO Capturing CUDA graphs\nERROR boom\n"
    assert _report(text).phase == "compiling"


def test_diagnose_stays_a_list_of_findings_for_callers() -> None:
    findings = diagnose(["ValueError: No available memory for the cache blocks."])
    assert findings[0].category == "kv_cache_insufficient" and findings[0].fix
