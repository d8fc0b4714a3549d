"""forklift: plan, launch, check, benchmark and diagnose vLLM deployments on hardware you own.

The public API, each name loaded on first use (``import forklift`` imports nothing else)::

    import forklift

    plan = forklift.plan("default", ["serve.max_model_len=4096"])   # a bundled recipe or a YAML file -> Plan
    result = forklift.up(plan, name="default")                       # -> UpResult (.record: RunRecord)
    target = forklift.Target.from_record(result.record)
    report = forklift.check(target, "quick")                         # -> CheckReport of CheckResults
    bench = forklift.bench(forklift.BenchConfig(concurrency=(1, 4)), target)   # -> BenchResult
    findings = forklift.diagnose(log_text.splitlines())              # -> [Finding], most likely cause first
    why = forklift.diagnose_run(record, runners)                      # every rank of a run -> RunDiagnosis

``forklift.plan``, ``forklift.check`` and ``forklift.bench`` are the packages of those names, called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from forklift.version import __version__

if TYPE_CHECKING:
    from forklift import bench, check, plan
    from forklift.bench.config import BenchConfig
    from forklift.bench.result import BenchResult
    from forklift.check.result import Report as CheckReport
    from forklift.cluster.diagnose import RunDiagnosis, diagnose_run
    from forklift.cluster.up import UpResult, up
    from forklift.doctor.diagnosis import diagnose
    from forklift.doctor.findings import Finding
    from forklift.endpoint.target import Target
    from forklift.errors import ForkliftError
    from forklift.plan.result import Plan, Unplanned
    from forklift.recipe.deployment import Deployment
    from forklift.recipe.schema import Recipe
    from forklift.record.run_record import RankState, RunRecord
    from forklift.results import CheckResult

_HOMES: dict[str, tuple[str, str | None]] = {
    "BenchConfig": ("forklift.bench.config", "BenchConfig"),
    "BenchResult": ("forklift.bench.result", "BenchResult"),
    "CheckReport": ("forklift.check.result", "Report"),
    "CheckResult": ("forklift.results", "CheckResult"),
    "Deployment": ("forklift.recipe.deployment", "Deployment"),
    "Finding": ("forklift.doctor.findings", "Finding"),
    "ForkliftError": ("forklift.errors", "ForkliftError"),
    "Plan": ("forklift.plan.result", "Plan"),
    "RankState": ("forklift.record.run_record", "RankState"),
    "Recipe": ("forklift.recipe.schema", "Recipe"),
    "RunDiagnosis": ("forklift.cluster.diagnose", "RunDiagnosis"),
    "RunRecord": ("forklift.record.run_record", "RunRecord"),
    "Target": ("forklift.endpoint.target", "Target"),
    "Unplanned": ("forklift.plan.result", "Unplanned"),
    "UpResult": ("forklift.cluster.up", "UpResult"),
    "bench": ("forklift.bench", None),
    "check": ("forklift.check", None),
    "diagnose": ("forklift.doctor.diagnosis", "diagnose"),
    "diagnose_run": ("forklift.cluster.diagnose", "diagnose_run"),
    "plan": ("forklift.plan", None),
    "up": ("forklift.cluster.up", "up"),
}
"""Public name -> (module, attribute there; None: the module itself, a package that is also the call)."""

__all__ = [
    "BenchConfig",
    "BenchResult",
    "CheckReport",
    "CheckResult",
    "Deployment",
    "Finding",
    "ForkliftError",
    "Plan",
    "RankState",
    "Recipe",
    "RunDiagnosis",
    "RunRecord",
    "Target",
    "Unplanned",
    "UpResult",
    "__version__",
    "bench",
    "check",
    "diagnose",
    "diagnose_run",
    "plan",
    "up",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'forklift' has no attribute {name!r}")
    module = importlib.import_module(home[0])
    value = module if home[1] is None else getattr(module, home[1])
    globals()[name] = value
    return value
