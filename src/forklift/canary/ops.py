"""What the canary does to machines, behind one small interface (``Ops``) so the flow can be tested with a fake:
start and stop deployments, measure them, check patches, read doctor's finding for a failed start."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from forklift.canary import measure
from forklift.canary.candidate import PatchCheck, patch_check
from forklift.cluster import down as cluster_down
from forklift.cluster.ready import diagnosis
from forklift.cluster.stop import is_alive, record_runners
from forklift.cluster.up import up
from forklift.errors import ForkliftError
from forklift.launch.hosts import runners_for
from forklift.plan import Plan, Unplanned
from forklift.recipe.schema import Recipe
from forklift.record import RunRecord
from forklift.record import load as load_record
from forklift.runner.ssh import default_ssh_config


class Ops(Protocol):
    def up(self, plan: Plan | Unplanned, name: str, *, force: bool) -> RunRecord: ...

    def down(self, record: RunRecord) -> None: ...

    def alive(self, record: RunRecord) -> bool: ...

    def check(self, record: RunRecord, tier: str, only: Sequence[str] | None, *, save: bool,
              golden_from: str | None = None) -> dict[str, Any]: ...

    def bench(self, record: RunRecord, settings: dict[str, Any], out_dir: Path | None) -> tuple[dict[str, Any], Path]:
        ...

    def patch_check(self, cand: Recipe) -> PatchCheck | None: ...

    def finding(self, name: str) -> str | None: ...


class LiveOps:
    """The real thing: ``cluster.up`` / ``cluster.down``, ``check`` and ``bench`` through ``canary.measure``."""

    def up(self, plan: Plan | Unplanned, name: str, *, force: bool) -> RunRecord:
        return up(plan, name=name, force=force).record

    def down(self, record: RunRecord) -> None:
        cluster_down.down(record)

    def alive(self, record: RunRecord) -> bool:
        return record.status in ("ready", "starting") and is_alive(record)

    def check(self, record: RunRecord, tier: str, only: Sequence[str] | None, *, save: bool,
              golden_from: str | None = None) -> dict[str, Any]:
        return measure.run_check(record, tier, only, save=save, golden_from=golden_from)

    def bench(self, record: RunRecord, settings: dict[str, Any], out_dir: Path | None) -> tuple[dict[str, Any], Path]:
        return measure.run_bench(record, settings, out_dir)

    def patch_check(self, cand: Recipe) -> PatchCheck | None:
        return patch_check(cand, runners_for(cand, ssh_config=default_ssh_config())[0])

    def finding(self, name: str) -> str | None:
        """doctor's top finding over every rank of the failed run (what `forklift doctor NAME` says first)."""
        try:
            rec = load_record(name)
            return diagnosis(rec, record_runners(rec))
        except ForkliftError:
            return None
