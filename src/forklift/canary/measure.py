"""Run a check tier and a bench workload against a run, the way ``forklift check`` / ``forklift bench`` do, and
keep the results with the run. The only module of the canary that calls ``check`` and ``bench``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forklift.bench.config import BenchConfig
from forklift.bench.loadgen import run as run_load
from forklift.bench.report import write as write_report
from forklift.bench.stats import Slo
from forklift.check import golden, registry
from forklift.check.context import Options
from forklift.check.registry import Tier
from forklift.check.runner import run as run_checks
from forklift.endpoint import Target
from forklift.errors import CanaryError
from forklift.record import RunRecord, runfiles

DEFAULT_WORKLOAD: dict[str, Any] = {"concurrency": [4], "input_len": 128, "output_len": 64, "requests": 24,
                                    "warmup": 2, "seed": 0}
"""What a canary measures when the baseline has no saved bench result: four streams, long enough per request
for ITL and TPOT to mean something, short enough for vLLM-CPU (about 20 s there)."""
PROOF_CHECKS: tuple[str, ...] = ("endpoint", "streaming")
"""A restored baseline answers: it serves the model, and a streamed greedy answer equals the plain one."""


def _check_ids(ids: Sequence[str] | None) -> tuple[str, ...] | None:
    if ids is None:
        return None
    known = registry.ids()
    return tuple(i for i in ids if i in known) or None


def run_check(record: RunRecord, tier: str = "quick", only: Sequence[str] | None = None, *,
              save: bool = True, golden_from: str | None = None) -> dict[str, Any]:
    """The check report's JSON (``forklift check NAME --json``), saved with the run unless ``save`` is False.
    ``golden_from``: compare with that run's golden transcript (the baseline's), and save none for this one."""
    chosen: Tier = "full" if tier == "full" else "quick"
    opts = Options(only=_check_ids(only))
    if golden_from is not None:
        path = golden.path_for(golden_from)
        opts = Options(only=opts.only, golden=path if path.is_file() else None, save_golden=False)
    report = run_checks(Target.from_record(record), chosen, opts)
    data = report.to_json()
    if save:
        runfiles.save_check(record.name, data, record.run_id)
    return data


def config_from(settings: dict[str, Any]) -> BenchConfig:
    """A saved result's ``settings`` back into the BenchConfig that produced them."""
    try:
        slo = settings.get("slo") or {}
        prompts = settings.get("prompts_file")
        config = BenchConfig(
            concurrency=tuple(settings.get("concurrency") or (1,)), input_len=int(settings.get("input_len", 128)),
            output_len=int(settings.get("output_len", 64)), requests=settings.get("requests"),
            duration_s=settings.get("duration_s"), rate=settings.get("rate"),
            prompts_file=Path(prompts) if prompts else None, warmup=int(settings.get("warmup", 1)),
            slo=Slo(slo.get("ttft_ms"), slo.get("tpot_ms"), slo.get("e2e_ms")),
            seed=int(settings.get("seed", 0)), ignore_eos=bool(settings.get("ignore_eos", True)))
    except (TypeError, ValueError) as exc:
        raise CanaryError(f"the saved bench settings cannot be repeated: {exc}",
                          fix="Run `forklift bench NAME` again against the baseline, then the canary.") from exc
    config.validate()
    return config


def run_bench(record: RunRecord, settings: dict[str, Any], out_dir: Path | None = None) -> tuple[dict[str, Any], Path]:
    """The same workload against the run; results.json and report.html written (by default with the run)."""
    result = run_load(config_from(settings), Target.from_record(record))
    written = write_report(result, out_dir or runfiles.fresh(runfiles.benches_dir(record.name)))
    return result.to_json(), written["results"]
