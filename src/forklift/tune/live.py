"""The real measurer: each candidate started with ``forklift up`` (its plan from the recipe plus the candidate's
``--set`` items), benched with ``forklift bench``'s load generator over the workload's prompt file for a fixed
time at the workload's concurrency, and stopped with ``forklift down``. One run name for every candidate (one
server at a time)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from forklift.bench.config import BenchConfig
from forklift.bench.loadgen import run as run_load
from forklift.bench.result import RunResult
from forklift.cluster import down as cluster_down
from forklift.cluster.up import up
from forklift.endpoint import Target
from forklift.errors import ForkliftError, TuneError
from forklift.plan import for_launch
from forklift.recipe.deployment import Deployment
from forklift.record import RunRecord
from forklift.tune.search import RunSample
from forklift.tune.slo import TuneSlo
from forklift.tune.space import Candidate
from forklift.tune.workloads import Workload


def sample_of(run: RunResult, candidate: str, workload: str, start: str, slo: TuneSlo) -> RunSample:
    """A bench run's requests -> goodput under the SLO and the SLO's percentiles."""
    limits = slo.per_request()
    ok = [r for r in run.records if r.ok and r.e2e is not None and r.ttft is not None]
    good = sum(1 for r in ok if limits.met(r.ttft or 0.0, r.tpot, r.e2e or 0.0))
    values = {"ttft": [1000.0 * (r.ttft or 0.0) for r in ok],
              "tpot": [1000.0 * r.tpot for r in ok if r.tpot is not None],
              "e2e": [1000.0 * (r.e2e or 0.0) for r in ok]}
    pct: dict[str, float | None] = dict(slo.percentiles(values))
    for metric, q in (("ttft", 50), ("tpot", 50), ("ttft", 95), ("tpot", 95), ("e2e", 95)):
        key = f"{metric}_p{q}"
        if key not in pct:
            pct[key] = float(_pct(values[metric], q)) if values[metric] else None
    duration = max(run.duration_s, 1e-9)
    tokens = sum(r.output_tokens for r in ok)
    return RunSample(candidate, workload, start, good / duration, tokens / duration, duration, len(run.records),
                     good, len(run.records) - len(ok), slo.met(values) and len(ok) == len(run.records), pct)


def _pct(values: list[float], q: float) -> float:
    from forklift.bench.stats import percentile

    return percentile(values, q) if values else math.nan


@dataclass
class LiveMeasurer:
    deployment: Deployment
    slo: TuneSlo
    folder: Path
    run_s: float = 60.0
    warmup: int = 2
    name: str = "tune"
    on_event: Callable[[str], None] = field(default=lambda _: None)
    _record: RunRecord | None = None
    _files: dict[tuple[str, int], Path] = field(default_factory=dict)
    _sent: dict[str, int] = field(default_factory=dict)
    """Requests sent to the running start per workload: the next run begins after them, so a later run of one
    start does not resend prompts the prefix cache already holds (every start begins at the first prompt)."""

    def _prompts(self, workload: Workload) -> Path:
        key = (workload.name, self._sent.get(workload.name, 0) % max(1, len(workload.requests)))
        if key not in self._files:
            self._files[key] = workload.write_jsonl(self.folder / f"workload-{key[0]}-{key[1]}.jsonl", key[1])
        return self._files[key]

    def start(self, candidate: Candidate) -> str:
        self._sent.clear()
        plan = for_launch(self.deployment.with_sets(list(candidate.sets)))
        result = up(plan, name=self.name, on_event=lambda phase, detail: self.on_event(f"{phase}: {detail}"))
        self._record = result.record
        return result.record.run_id

    def bench(self, candidate: Candidate, workload: Workload, start: str) -> RunSample:
        if self._record is None:
            raise TuneError(f"{candidate.name} is not running", fix="Start it first (a bug in the search).")
        config = BenchConfig(concurrency=(workload.concurrency,), requests=None, duration_s=self.run_s,
                             prompts_file=self._prompts(workload), warmup=self.warmup, slo=self.slo.per_request(),
                             ignore_eos=True)
        result = run_load(config, Target.from_record(self._record))
        if not result.runs:
            raise TuneError(f"{candidate.name}: the bench ran no level ({result.aborted})",
                            fix="Look at the run's log with `forklift logs`.")
        self._sent[workload.name] = self._sent.get(workload.name, 0) + self.warmup + len(result.runs[0].records)
        return sample_of(result.runs[0], candidate.name, workload.name, start, self.slo)

    def stop(self, candidate: Candidate) -> None:
        record, self._record = self._record, None
        if record is not None:
            cluster_down.down(record)
        else:  # a failed start leaves a record (status failed) that `down` clears so the name is free again
            from forklift.record import load as load_record

            try:
                cluster_down.down(load_record(self.name))
            except ForkliftError:  # nothing recorded under the name: nothing to stop
                return
