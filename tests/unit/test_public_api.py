"""The named public API: ``import forklift`` and nothing else. What a unit test can call without a server is called."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import forklift
from forklift.bench import _Bench
from forklift.check import _Checks
from forklift.plan import _Planner

PUBLIC = ["BenchConfig", "BenchResult", "CheckReport", "CheckResult", "Deployment", "Finding", "ForkliftError", "Plan",
          "RankState", "Recipe", "RunDiagnosis", "RunRecord", "Target", "Unplanned", "UpResult", "__version__", "bench",
          "check", "diagnose", "diagnose_run", "plan", "up"]


def test_all_is_sorted_and_names_exactly_the_public_api() -> None:
    assert forklift.__all__ == sorted(forklift.__all__) == PUBLIC
    for name in forklift.__all__:
        assert getattr(forklift, name) is not None, name


def test_import_forklift_loads_nothing_else() -> None:
    code = "import sys, json, forklift; print(json.dumps(sorted(m for m in sys.modules if m.startswith('forklift'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == ["forklift", "forklift.version"]


def _planner() -> _Planner:
    """``forklift.plan``, the package that is also the call (a type checker sees a module, which it cannot call)."""
    planner = forklift.plan
    assert isinstance(planner, _Planner)
    return planner


def test_plan_the_default_recipe() -> None:
    plan = _planner()("default")
    assert isinstance(plan, forklift.Plan) and plan.fits and plan.kv_tokens > 0
    assert plan.to_json() == _planner()("default", []).to_json()
    smaller = _planner()("default", ["serve.max_model_len=1024"])
    assert smaller.max_model_len == 1024


def test_plan_is_still_the_planner_package() -> None:
    assert callable(forklift.plan) and forklift.plan.make is not None and forklift.plan.Plan is forklift.Plan


def test_diagnose_a_log_text() -> None:
    log = ("INFO 11-30 10:00:00 worker.py:1 loading weights\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.19 GiB of which 1.50 GiB is free.\n")
    findings = forklift.diagnose(log.splitlines())
    assert findings and all(isinstance(f, forklift.Finding) for f in findings)
    assert "oom" in findings[0].category


def test_check_and_bench_name_a_target_they_cannot_reach() -> None:
    target = forklift.Target.from_url("http://127.0.0.1:9", model="m")  # nothing listens on the discard port
    checks, bench = forklift.check, forklift.bench  # the packages that are also the calls
    assert isinstance(checks, _Checks) and isinstance(bench, _Bench)
    with pytest.raises(forklift.ForkliftError, match="cannot reach"):
        checks(target, "quick")
    with pytest.raises(forklift.ForkliftError, match="cannot reach"):
        bench(forklift.BenchConfig(concurrency=(1,), input_len=16, output_len=8), target)


def test_up_refuses_a_plan_that_does_not_fit_before_touching_a_node() -> None:
    tiny = _planner()("default", ["serve.cpu_kv_cache_gib=0.001"])  # no room for one 4096-token request
    assert not tiny.fits
    with pytest.raises(forklift.ForkliftError):
        forklift.up(tiny, name="public-api-test")


def test_a_record_and_a_result_are_the_public_types() -> None:
    result = forklift.CheckResult("endpoint", "ok", "served")
    assert result.status == "ok"
    assert issubclass(forklift.ForkliftError, Exception)
    assert "ranks" in forklift.RunRecord.model_fields


def test_diagnose_run_reads_every_rank_and_the_record(tmp_path: Path) -> None:
    """The failure is in rank 1's log only, and the record says rank 1 died: one diagnosis names it."""
    from forklift.launch.render import render
    from forklift.plan import for_launch
    from forklift.recipe import resolve
    from forklift.runner import LocalRunner

    logs = [tmp_path / "rank0.log", tmp_path / "rank1.log"]
    logs[0].write_text("INFO 11-30 10:00:00 [core.py:1] waiting for the other ranks\n")
    logs[1].write_text("INFO 11-30 10:00:00 [worker.py:1] loading weights\n"
                       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                       "capacity of 79.19 GiB of which 1.50 GiB is free.\n")
    plan = for_launch(resolve("default", ["serve.port=18557"]))
    launch = render(plan, run_id="xyz")
    record = forklift.RunRecord(
        name="two", run_id="xyz", plan=plan, launch=launch, endpoint=launch.endpoint, served_name=launch.served_name,
        status="failed", error="rank 1 on localhost exited during startup (phase: loading weights)",
        ranks=[forklift.RankState(rank=i, host="localhost", pid=None, log_path=str(p), node_index=0)
               for i, p in enumerate(logs)])
    why = forklift.diagnose_run(record, {0: LocalRunner()}, nodes=False)
    assert isinstance(why, forklift.RunDiagnosis)
    assert why.context.failed_rank == 1 and why.context.phase == "loading weights"
    assert why.report.top is not None and "oom" in why.report.top.category
    top_line = why.top_line()
    assert top_line is not None and why.report.top.title in top_line
    assert any(label.endswith("rank 1 log") for label in (s.label for s in why.sources))
