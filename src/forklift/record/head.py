"""A run record as a remote head sees it, and back (pure: records and text in, records out).

A supervisor on a remote head (``supervise.where: head``) runs the head's own forklift from the head's own forklift
home. It needs the run's record there with node 0 made local (``localhost``: its ranks start through a LocalRunner,
its run folder is beside the record) and the workers reached as the head reaches them (their ``ssh`` targets as
written, through the head's own SSH config). ``for_head`` writes that copy; ``from_head`` turns the head's record
(rewritten by every restart there) back into this machine's view, so ``status``, ``logs`` and ``down`` here act on
what runs now. Keys by host (memory baselines, pins, facts) follow node 0's name both ways.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from forklift.errors import RunError
from forklift.launch.render import node_addr
from forklift.record.run_record import RunRecord
from forklift.record.supervisor import HeadRef, SupervisorState

LOCAL_HOST = "localhost"
"""Node 0's name on the head (what makes it local there: `Node.is_local`)."""


def _rename(mapping: Mapping[str, Any], old: str, new: str) -> dict[str, Any]:
    return {(new if k == old else k): v for k, v in mapping.items()}


def _rehost(data: dict[str, Any], old: str, new: str) -> None:
    """Every key or field naming node 0 by host, renamed (in place, on a record's JSON)."""
    for key in ("gpu_baseline_mib", "gpu_indices"):
        data[key] = _rename(data.get(key) or {}, old, new)
    pins = data.get("pins") or {}
    for key in ("vllm_versions", "vllm_builds", "image_digests", "host_stacks"):
        if key in pins:
            pins[key] = _rename(pins[key] or {}, old, new)
    for pin in pins.get("patches") or []:
        if pin.get("host") == old:
            pin["host"] = new
    for patch in data.get("patches") or []:
        if isinstance(patch, dict) and patch.get("host") == old:
            patch["host"] = new
    deployment = data["plan"]["deployment"]
    deployment["facts"] = _rename(deployment.get("facts") or {}, old, new)


def for_head(record: RunRecord) -> RunRecord:
    """The record a remote head keeps: node 0 local (host ``localhost``, no ssh target, its data address kept so
    the workers still reach the head where they did), its ranks local, this machine's ssh config dropped (the head
    uses its own); everything else as it is."""
    head = record.recipe.head
    if head.is_local:
        raise RunError(f"{record.name}: node 0 is this machine; there is no remote head to copy the record to",
                       fix="Run the supervisor here (`forklift up --supervise` does).")
    data = record.model_dump(mode="json")
    node0 = data["plan"]["deployment"]["recipe"]["nodes"][0]
    node0.update(host=LOCAL_HOST, ssh=None, data_ip=node_addr(head))
    for rank in data["ranks"]:
        if rank.get("node_index", rank["rank"]) in (0, None) and rank["host"] == head.host:
            rank.update(host=LOCAL_HOST, ssh=None)
    data["ssh_config"] = None
    _rehost(data, head.host, LOCAL_HOST)
    return RunRecord.model_validate(data)


def from_head(head_record: RunRecord, mine: RunRecord) -> RunRecord:
    """This machine's view of the head's record: the plan (and so the recipe's nodes) as this machine wrote it,
    node 0's ranks named and reached as here, this machine's ssh config and endpoint; the head's ranks, status,
    run id, pins and timings (a restart there changes them)."""
    if head_record.name != mine.name:
        raise RunError(f"the head's record is for run {head_record.name!r}, not {mine.name!r}",
                       fix=f"Start {mine.name} again with `forklift up --supervise`.")
    head = mine.recipe.head
    data = head_record.model_dump(mode="json")
    data["plan"] = mine.plan.model_dump(mode="json")
    for rank in data["ranks"]:
        if rank["host"] == LOCAL_HOST:
            rank.update(host=head.host, ssh=head.ssh)
    data["ssh_config"] = mine.ssh_config
    data["endpoint"] = mine.endpoint
    _rehost(data, LOCAL_HOST, head.host)
    return RunRecord.model_validate(data)


def state_for_head(state: SupervisorState, head_host: str) -> SupervisorState:
    """The supervisor state the head starts from (host keys renamed; no head reference: there it is local)."""
    return state.model_copy(update={
        "head": None, "pid": None, "host": None,
        "baseline_mem_available": _rename(state.baseline_mem_available, head_host, LOCAL_HOST),
        "boot_ids": _rename(state.boot_ids, head_host, LOCAL_HOST)})


def state_from_head(text: str, ref: HeadRef) -> SupervisorState:
    """The head's ``supervisor.json`` as this machine keeps it (host keys renamed back, the head reference kept)."""
    try:
        state = SupervisorState.model_validate_json(text)
    except (ValidationError, ValueError) as exc:
        raise RunError(f"the supervisor state on {ref.host} cannot be read: {exc}",
                       fix=f"Look at {ref.home}/runs on {ref.host}; its forklift may be another version.") from None
    return state.model_copy(update={
        "head": ref,
        "baseline_mem_available": _rename(state.baseline_mem_available, LOCAL_HOST, ref.host),
        "boot_ids": _rename(state.boot_ids, LOCAL_HOST, ref.host)})


def record_from_text(text: str, where: str) -> RunRecord:
    """A record read from another machine (its JSON as text)."""
    try:
        return RunRecord.model_validate(json.loads(text))
    except (ValidationError, ValueError) as exc:
        raise RunError(f"the run record on {where} cannot be read: {str(exc)[:300]}",
                       fix=f"Run the same forklift version here and on {where}.") from None


__all__ = ["LOCAL_HOST", "HeadRef", "for_head", "from_head", "record_from_text", "state_for_head",
           "state_from_head"]
