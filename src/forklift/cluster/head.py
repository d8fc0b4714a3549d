"""A supervisor on a remote head, seen from this machine: its record and state read over SSH (``cat`` through the
head's Runner) and kept here in this machine's view (``record.head.from_head``), and the head's copy marked stopped
after ``down``. Nothing here needs forklift on the head; starting the supervisor there does (``supervise.remote``).
"""

from __future__ import annotations

from forklift.errors import ForkliftError
from forklift.host import remote
from forklift.record import RunRecord
from forklift.record.head import for_head, from_head, record_from_text, state_for_head, state_from_head
from forklift.record.supervisor import HeadRef, SupervisorState, save_state
from forklift.runner import Runner
from forklift.runner.ssh import SshRunner, default_ssh_config


def head_runner(ref: HeadRef, timeout_s: float = 60.0) -> Runner:
    return SshRunner(ref.ssh, name=ref.host, ssh_config=ref.ssh_config or default_ssh_config(),
                     default_timeout=timeout_s)


def head_paths(ref: HeadRef, name: str) -> tuple[str, str]:
    """(record.json, supervisor.json) of the run in the head's forklift home."""
    folder = f"{ref.home.rstrip('/')}/runs/{name}"
    return f"{folder}/record.json", f"{folder}/supervisor.json"


def sync(record: RunRecord, ref: HeadRef, runner: Runner | None = None) -> tuple[RunRecord, SupervisorState | None,
                                                                              str | None]:
    """The head's record and supervisor state, saved here in this machine's view. Returns (record, state, None), or
    (this machine's record, None, why) when the head could not be read (unreachable, files gone), or (this
    machine's record, None, None) when the run was started here again after the head's copy was written."""
    runner = runner or head_runner(ref, record.recipe.timeouts.ssh_s)
    rec_path, state_path = head_paths(ref, record.name)
    try:
        rec = runner.run(["cat", rec_path], timeout=30)
        st = runner.run(["cat", state_path], timeout=30)
        if not rec.ok or not st.ok:
            tail = ((rec.stderr if not rec.ok else st.stderr).strip().splitlines() or ["no output"])[-1]
            return record, None, f"cannot read the supervisor's files on {ref.host}: {tail}"
        theirs = record_from_text(rec.stdout, ref.host)
        if theirs.run_id != record.run_id and theirs.created_at <= record.created_at:
            return record, None, None  # started here since (a plain `up`): the head's copy is an older run
        mine = from_head(theirs, record)
        state = state_from_head(st.stdout, ref)
    except ForkliftError as exc:
        return record, None, f"cannot read the supervisor's state on {ref.host}: {exc.message}"
    if mine.model_dump() != record.model_dump():
        mine.save()
    save_state(state)
    return mine, state, None


def mark_stopped(record: RunRecord, state: SupervisorState, ref: HeadRef, runner: Runner | None = None) -> None:
    """Write the head's record as stopped (and its supervisor as stopped), so a unit started at boot there does not
    bring back what `down` stopped here."""
    runner = runner or head_runner(ref, record.recipe.timeouts.ssh_s)
    rec_path, state_path = head_paths(ref, record.name)
    stopped = for_head(record.model_copy(update={"status": "stopped"}))
    remote.write_text(runner, rec_path, stopped.model_dump_json(indent=2))
    there = state_for_head(state, ref.host).model_copy(update={"state": "stopped"})
    remote.write_text(runner, state_path, there.model_dump_json(indent=2))


__all__ = ["head_paths", "head_runner", "mark_stopped", "sync"]
