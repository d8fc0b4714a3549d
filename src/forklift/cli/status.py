"""``forklift status``, ``forklift logs`` and ``forklift down``; :func:`load_run` for every command that
takes a run name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from forklift.cli.common import JsonOpt, NameArg, console, print_json, render_error
from forklift.errors import RunError, RunNotFoundError, UnreadableRecordError
from forklift.host.stack import describe

if TYPE_CHECKING:
    from forklift.cluster.down import DownResult
    from forklift.record import Pins, RunRecord


def load_run(name: str | None, *, exit_code: int | None = None) -> RunRecord:
    """The run a command means (the one named, else the only one). ``exit_code`` overrides the error's own when
    the run cannot be found: ``check`` and ``bench`` exit 2, "could not run", rather than 1."""
    from forklift import record as records

    try:
        return records.load(records.resolve_name(name))
    except RunError as exc:
        if exit_code is None:
            raise
        render_error(exc)
        raise typer.Exit(exit_code) from exc


PinsOpt = Annotated[bool, typer.Option("--pins", help="Also show what exactly ran: vLLM build, image digest, model "
                                                     "revision, recipe hash, patches, each node's host stack "
                                                     "(kernel, driver, CUDA, NCCL, NIC firmware, OS).")]


def _print_pins(pins: Pins) -> None:
    rows = [("forklift", pins.forklift_version), ("vLLM", pins.vllm_version), ("vLLM build", pins.vllm_build),
            ("image", pins.image), ("image digest", pins.image_digest), ("model revision", pins.model_revision),
            ("recipe hash", pins.recipe_hash)]
    rows += [(f"vLLM build on {h}", b) for h, b in pins.vllm_builds.items() if b != pins.vllm_build]
    rows += [(f"image digest on {h}", d) for h, d in pins.image_digests.items() if d != pins.image_digest]
    rows += [(f"patch {p.id}" + (f" on {p.host}" if p.host else ""),
              ", ".join(f"{f} {h[:12]}" for f, h in p.files.items()) or "no files recorded") for p in pins.patches]
    rows += [(f"host stack on {h}", describe(stack)) for h, stack in pins.host_stacks.items()]
    console.print("  pins:")
    for label, value in rows:
        if value:
            console.print(f"    {label}: {value}", highlight=False, soft_wrap=True)


def status_cmd(name: NameArg = None, json_out: JsonOpt = False, pins: PinsOpt = False) -> None:
    """Show a run (or all runs): state, endpoint, ranks (and with --pins, what exactly ran)."""
    from forklift import record as records
    from forklift.cluster import down as ops

    if name is None and (len(records.list_names()) != 1 or records.list_unreadable()):
        _status_all(json_out)
        return
    s = ops.status(load_run(name))
    if json_out:
        print_json(s.to_json() | {"pins": s.record.pins.model_dump()})
        return
    console.print(f"[bold]{s.name}[/] {s.status} at {s.endpoint} ({s.served_name}, vLLM {s.vllm_version}, "
                  f"health {'ok' if s.healthy else 'not answering'})", highlight=False)
    for r in s.record.ranks:
        state = "alive" if r.rank in s.alive_ranks and r.role == "engine" else "gone"
        role = "" if r.role == "engine" else f" ({r.role})"
        console.print(f"  rank {r.rank}{role} on {r.host}: pid {r.pid} {state}, log {r.log_path}", highlight=False)
    for problem in s.problems:
        console.print(f"  [yellow]{escape(problem)}[/]", highlight=False)
    if s.record.error:
        console.print(f"  last error: {escape(s.record.error)}", highlight=False)
    if s.supervisor:
        _print_supervisor(s.supervisor)
    if s.fix:
        console.print(f"  [bold]fix[/]: {escape(s.fix)}", highlight=False)
    if pins:
        _print_pins(s.record.pins)


def _ago(at: object) -> str:
    import time

    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(float(at)))}" if isinstance(at, int | float) else "?"


def _print_supervisor(sup: dict[str, object]) -> None:
    running = "running" if sup["running"] else "not running"
    where = f" on {sup['on_head']}" if sup.get("on_head") else ""
    console.print(f"  supervisor: {sup['state']} ({running}, pid {sup['pid']}{where}), restarts in the window "
                  f"{sup['restarts_in_window']}/{sup['max_restarts']} ({sup['restarts_total']} in all)",
                  highlight=False, soft_wrap=True)
    if sup.get("last_cause"):
        finding = f"; doctor: {sup['last_finding']}" if sup.get("last_finding") else ""
        console.print(f"    last cause ({_ago(sup['last_cause_at'])}): {escape(str(sup['last_cause']))}"
                      f"{escape(finding)}", highlight=False, soft_wrap=True)
    if sup.get("last_recovery_at"):
        console.print(f"    recovered {_ago(sup['last_recovery_at'])}, {sup['last_recovery_s']} s after the failure",
                      highlight=False, soft_wrap=True)
    if sup.get("gave_up"):
        console.print(f"    [bold red]gave up[/]: {escape(str(sup['gave_up']))}", highlight=False, soft_wrap=True)


def _status_all(json_out: bool) -> None:
    """Every run, readable or not: an unreadable record is listed with what it may still run."""
    from rich.table import Table

    from forklift import record as records
    from forklift.cluster import down as ops

    results = [ops.status(r) for r in records.list_records()]
    broken = [(n, exc, records.salvage(n)) for n, exc in records.list_unreadable()]
    if json_out:
        unreadable = [{"name": n, "status": "unreadable", "error": exc.message, "fix": exc.fix,
                       "may_still_run": [r.__dict__ for r in left.ranks], "port": left.port} for n, exc, left in broken]
        print_json([s.to_json() | {"pins": s.record.pins.model_dump()} for s in results] + unreadable)
        return
    table = Table("name", "status", "endpoint", "model", "ranks alive")
    for s in results:
        table.add_row(s.name, s.status, s.endpoint, s.served_name, f"{len(s.alive_ranks)}/{len(s.record.ranks)}")
    for n, _, left in broken:
        table.add_row(n, "unreadable", left.endpoint or "?", "?", left.describe() or "nothing recorded")
    console.print(table if results or broken else "no runs; start one with `forklift up`")
    for n, _, _ in broken:
        console.print(f"{n}: record unreadable; `forklift down {n}` stops what it names and frees the name",
                      highlight=False)


def logs_cmd(
    name: NameArg = None,
    rank: Annotated[int, typer.Option("--rank", "-r", help="Which rank's log.")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines.", min=0, max=10_000_000)] = None,
) -> None:
    """Print a rank's engine log."""
    from forklift.cluster import down as ops

    rec = load_run(name)
    if follow:
        try:
            for line in ops.follow_log(rec, rank):
                print(line, flush=True)
        except KeyboardInterrupt:
            return
    for line in ops.read_log(rec, rank, tail):
        print(line)


def down_cmd(name: NameArg = None, json_out: JsonOpt = False) -> None:
    """Stop every process of a run (SIGTERM, wait, SIGKILL) and verify nothing remains. Idempotent."""
    from forklift import record as records
    from forklift.cluster import down as ops

    run_name = records.resolve_name(name)
    try:
        rec = records.load(run_name)
    except UnreadableRecordError:
        _print_down(ops.down_unreadable(run_name), json_out, note="record was unreadable; set aside")
        return
    except RunNotFoundError:
        if json_out:
            print_json({"name": run_name, "was_running": False, "stopped_ranks": [], "note": "no such run"})
        else:
            console.print(f"nothing to stop: no run named '{run_name}'")
        return
    _print_down(ops.down(rec), json_out)


def _print_down(res: DownResult, json_out: bool, note: str | None = None) -> None:
    if json_out:
        print_json(res.__dict__ | ({"note": note} if note else {}))
        return
    if note:
        console.print(f"{res.name}: {note}")
    if res.was_running:
        console.print(f"stopped {res.name}: ranks {res.stopped_ranks} on {', '.join(res.hosts)} "
                      f"in {res.seconds:.1f} s; no process left, port free")
        for host, state in res.accelerator.items():
            console.print(f"  {host}: accelerator memory {state}")
        if res.supervisor:
            console.print(f"  {res.supervisor}")
        for what in res.killed:
            console.print(f"  {what} ignored SIGTERM for the grace period and was killed")
    else:
        console.print(f"{res.name} was not running; nothing left to stop")


def register(app: typer.Typer) -> None:
    app.command("status")(status_cmd)
    app.command("logs")(logs_cmd)
    app.command("down")(down_cmd)
