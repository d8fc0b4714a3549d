"""The canary's flow with a fake Ops (no processes): which deployments are stopped, started, measured and
restored, for each verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from forklift.canary import flow
from forklift.canary.candidate import PatchCheck
from forklift.errors import BenchError, CanaryError, EngineStartupError, RunError
from forklift.launch.render import render
from forklift.plan import Plan, Unplanned, for_launch
from forklift.recipe import Recipe, resolve
from forklift.record import RunRecord, runfiles
from tests.unit.canary.samples import bench_json, check_json

PASSING = {"endpoint": "pass", "completion": "pass", "streaming": "pass"}


class FakeOps:
    def __init__(self, base_seqs: int | None, *, dilation: float = 1.0, cand_checks: dict[str, str] | None = None,
                 fail_start: bool = False, patches: PatchCheck | None = None, bench_error: bool = False,
                 stuck_base: bool = False) -> None:
        self.bench_error = bench_error
        self.stuck_base = stuck_base
        self.base_seqs = base_seqs
        self.dilation = dilation
        self.cand_checks = cand_checks or PASSING
        self.fail_start = fail_start
        self.patches = patches
        self.calls: list[tuple[str, str]] = []
        self.goldens: list[str | None] = []
        self.seed = 10

    def _is_base(self, record: RunRecord) -> bool:
        return record.recipe.serve.max_num_seqs == self.base_seqs

    def up(self, plan: Plan | Unplanned, name: str, *, force: bool) -> RunRecord:
        self.calls.append(("up", name))
        if self.fail_start and plan.deployment.recipe.serve.max_num_seqs != self.base_seqs:
            raise EngineStartupError("rank 0 exited with code 1", rank=0, host="localhost",
                                     log_tail=["ValueError: bad"], fix="doctor: something")
        return _record(name, plan)

    def down(self, record: RunRecord) -> None:
        self.calls.append(("down", record.name))
        if self.stuck_base and self._is_base(record):
            self.stuck_base = False
            raise RunError("base: pid 4242 survived SIGKILL", fix="reboot the node")
        record.status = "stopped"
        record.save()

    def alive(self, record: RunRecord) -> bool:
        return record.status == "ready"

    def check(self, record: RunRecord, tier: str, only: Sequence[str] | None, *, save: bool,
              golden_from: str | None = None) -> dict[str, Any]:
        self.calls.append(("check", record.name))
        self.goldens.append(golden_from)
        data = check_json(**(PASSING if self._is_base(record) else self.cand_checks))
        if only is not None:
            data["checks"] = [c for c in data["checks"] if c["id"] in only]
        if save:
            runfiles.save_check(record.name, data, record.run_id)
        return data

    def bench(self, record: RunRecord, settings: dict[str, Any], out_dir: Path | None) -> tuple[dict[str, Any], Path]:
        self.calls.append(("bench", record.name))
        if self.bench_error and not self._is_base(record):
            raise BenchError("input 64 + output 32 tokens exceed max_model_len 64", fix="shorter")
        self.seed += 1
        data = bench_json(self.seed, dilation=1.0 if self._is_base(record) else self.dilation)
        folder = out_dir or runfiles.fresh(runfiles.benches_dir(record.name))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps(data))
        return data, folder / "results.json"

    def patch_check(self, cand: Recipe) -> PatchCheck | None:
        self.calls.append(("patch_check", cand.runtime.kind))
        return self.patches

    def finding(self, name: str) -> str | None:
        return "Bad setting (config): lower it"


def _record(name: str, plan: Plan | Unplanned) -> RunRecord:
    launch = render(plan, run_id="r" + name)
    rec = RunRecord(name=name, run_id="r" + name, plan=plan, launch=launch, endpoint=launch.endpoint,
                    served_name=launch.served_name, status="ready")
    rec.save()
    return rec


@pytest.fixture
def baseline() -> RunRecord:
    return _record("base", for_launch(resolve("default", ["serve.port=18123", "serve.max_num_seqs=4"])))


def _measured(ops: FakeOps, rec: RunRecord) -> None:
    ops.check(rec, "quick", None, save=True)
    ops.bench(rec, {}, None)
    ops.calls.clear()
    ops.goldens.clear()


def test_a_slower_candidate_regresses_and_the_baseline_comes_back(baseline: RunRecord) -> None:
    ops = FakeOps(4, dilation=3.0)  # beyond what one start per side can blame on start-to-start noise
    _measured(ops, baseline)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=1",)), ops=ops)
    assert out.verdict == "regressed" and "output_tok_s at c=4" in out.reason
    assert ops.calls == [("bench", "base"), ("down", "base"), ("up", "base"), ("check", "base"), ("bench", "base"),
                         ("down", "base"), ("up", "base"), ("check", "base")]
    assert ops.goldens == ["base", None]  # the candidate's greedy answers against the baseline's golden transcript
    assert out.restored is not None and out.restored["ok"] and out.restored["checks"] == {
        "endpoint": "pass", "streaming": "pass"}
    assert out.mode == "replace" and not out.kept
    saved = json.loads((out.folder / "canary.json").read_text())
    assert saved["verdict"] == "regressed" and saved["sets"] == ["serve.max_num_seqs=1"]
    assert (out.folder / "report.html").read_text().count("regressed") >= 2
    assert json.loads((out.folder / "baseline-record.json").read_text())["run_id"] == "rbase"


def test_a_candidate_that_does_not_start_is_broken_with_doctors_finding(baseline: RunRecord) -> None:
    ops = FakeOps(4, fail_start=True)
    _measured(ops, baseline)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=1",)), ops=ops)
    assert out.verdict == "broken" and "did not start" in out.reason and "Bad setting" in out.reason
    assert out.startup is not None and out.startup["doctor"] == "Bad setting (config): lower it"
    assert [c[0] for c in ops.calls] == ["bench", "down", "up", "up", "check"]  # no measurement, baseline restored
    assert out.restored is not None and out.restored["ok"]


def test_a_candidate_failing_a_check_is_broken_and_not_benched(baseline: RunRecord) -> None:
    ops = FakeOps(4, cand_checks={**PASSING, "completion": "fail"})
    _measured(ops, baseline)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=1",)), ops=ops)
    assert out.verdict == "broken" and "completion" in out.reason
    assert ops.calls.count(("bench", "base")) == 1 and ops.calls[0] == ("bench", "base")  # the baseline's only
    assert out.restored is not None and out.restored["ok"]
    saved = runfiles.latest_check("base")
    assert saved is not None
    latest = json.loads(saved.read_text())
    assert latest["passed"] is True  # the candidate's failing report was not saved as the run's


def test_ok_with_keep_on_ok_keeps_the_candidate_and_its_results(baseline: RunRecord) -> None:
    ops = FakeOps(4, dilation=1.0)
    _measured(ops, baseline)
    before = runfiles.latest_bench("base")
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",), keep_on_ok=True, gate=("failed_requests",)),
                   ops=ops)
    assert out.verdict == "ok", out.reason
    assert out.kept and out.restored is None and ops.calls[-1] == ("bench", "base")
    after = runfiles.latest_bench("base")
    assert after != before and after is not None
    assert json.loads(after.read_text()) == json.loads((out.folder / "candidate-bench" / "results.json").read_text())


def test_patches_that_do_not_apply_stop_the_canary_before_the_baseline_is_touched(baseline: RunRecord,
                                                                                  tmp_path: Path) -> None:
    bad = PatchCheck("installed vLLM 0.31.0", [{"id": "p", "status": "drift", "in_range": True, "range": ">=0",
                                                "problems": ["signature changed"]}])
    ops = FakeOps(4, patches=bad)
    _measured(ops, baseline)
    out = flow.run("base", flow.Options(sets=(f"runtime.python={tmp_path}/venv/bin/python",)), ops=ops)
    assert out.verdict == "broken" and "p (drift)" in out.reason
    assert ops.calls == [("bench", "base"), ("patch_check", "venv")]


def test_a_baseline_without_saved_results_is_measured_first(baseline: RunRecord) -> None:
    ops = FakeOps(4)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",), gate=("failed_requests",)), ops=ops)
    assert ops.calls[:3] == [("check", "base"), ("bench", "base"), ("down", "base")]
    assert out.verdict == "ok"


def test_beside_needs_room_and_leaves_the_baseline_running(baseline: RunRecord) -> None:
    ops = FakeOps(4)
    _measured(ops, baseline)
    with pytest.raises(CanaryError, match="both do not fit"):
        flow.run("base", flow.Options(sets=("serve.cpu_kv_cache_gib=14",), beside=True), ops=ops)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",), beside=True), ops=ops)
    assert out.candidate_name == "base-canary" and "serve.port=18124" in out.sets
    assert ("down", "base") not in ops.calls and ("down", "base-canary") in ops.calls
    assert out.restored is None


def test_no_running_baseline_is_an_error(baseline: RunRecord) -> None:
    baseline.status = "stopped"
    baseline.save()
    with pytest.raises(CanaryError, match="not running"):
        flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",)), ops=FakeOps(4))
    with pytest.raises(CanaryError, match="no baseline run named 'nope'"):
        flow.run("nope", flow.Options(sets=("serve.max_num_seqs=2",)), ops=FakeOps(4))


def test_rebench_baseline_measures_it_again_before_the_swap(baseline: RunRecord) -> None:
    ops = FakeOps(4)
    _measured(ops, baseline)
    first = runfiles.latest_bench("base")
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",), rebench_baseline=True), ops=ops)
    assert ops.calls[:2] == [("bench", "base"), ("down", "base")]
    assert runfiles.latest_bench("base") != first and str(runfiles.latest_bench("base")) in out.notes[-1]


def test_a_candidate_the_workload_cannot_run_on_is_broken_and_the_baseline_restored(baseline: RunRecord) -> None:
    ops = FakeOps(4, bench_error=True)
    _measured(ops, baseline)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",)), ops=ops)
    assert out.verdict == "broken" and "BenchError: input 64 + output 32" in out.reason
    assert ops.calls[-2:] == [("up", "base"), ("check", "base")] and out.restored is not None


def test_a_baseline_that_will_not_stop_is_broken_restored_and_written(baseline: RunRecord) -> None:
    ops = FakeOps(4, stuck_base=True)
    _measured(ops, baseline)
    with pytest.raises(RunError, match="survived SIGKILL"):
        flow.run("base", flow.Options(sets=("serve.max_num_seqs=1",)), ops=ops)
    assert ops.calls[1] == ("down", "base") and ("up", "base") in ops.calls[2:]  # restore was tried
    (folder,) = runfiles.canaries_dir("base").iterdir()
    saved = json.loads((folder / "canary.json").read_text())
    assert saved["verdict"] == "broken" and "survived SIGKILL" in saved["reason"]


def test_a_small_drop_from_one_start_each_is_inconclusive_and_not_kept(baseline: RunRecord) -> None:
    ops = FakeOps(4, dilation=1.25)
    _measured(ops, baseline)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",), keep_on_ok=True), ops=ops)
    assert out.verdict == "inconclusive" and "noise" in out.reason and "exceeds the 5% threshold" in out.reason
    assert not out.kept and out.restored is not None and out.restored["ok"]


def test_beside_with_repeats_benches_baseline_and_candidate_alternately(baseline: RunRecord) -> None:
    ops = FakeOps(4)
    _measured(ops, baseline)
    out = flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",), beside=True, repeats=3), ops=ops)
    benches = [name for what, name in ops.calls if what == "bench"]
    assert benches == ["base", "base-canary"] * 3
    assert out.bench is not None and out.bench.evidence["runs_a"] == 3 and out.bench.evidence["runs_b"] == 3
    with pytest.raises(CanaryError, match="at least one bench run"):
        flow.run("base", flow.Options(sets=("serve.max_num_seqs=2",), repeats=0), ops=ops)
