"""``forklift check``: the acceptance suite against a run or any OpenAI-compatible URL."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from forklift import check
from forklift import record as records
from forklift.canary.store import save_check
from forklift.check.target import reference_from
from forklift.cli.common import JsonOpt, NameArg, console, err_console, print_json
from forklift.errors import CheckError

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError as exc:
        raise CheckError(f"{what}: {text!r} is not a list of integers", fix=f"For example {what} 1024,4000") from exc


def _floats(text: str | None, what: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError as exc:
        raise CheckError(f"{what}: {text!r} is not a list of numbers", fix=f"For example {what} 0.1,0.5,0.9") from exc


def _only(text: str | None) -> tuple[check.CheckId, ...] | None:
    if text is None:
        return None
    ids = [x for x in text.replace(" ", "").split(",") if x]
    known = {str(c): c for c in check.CHECK_IDS}
    bad = [x for x in ids if x not in known]
    if bad:
        raise CheckError(f"--only: unknown check(s) {', '.join(bad)}", fix="Choose from " + ", ".join(known))
    return tuple(known[x] for x in ids)


def _target(name: str | None, url: str | None, model: str | None, api_key_env: str | None,
            max_model_len: int | None) -> check.Target:
    if url is not None:
        if name is not None:
            raise CheckError("pass a run NAME or --url, not both", fix="Drop one of them.")
        return check.from_url(url, model=model, api_key_env=api_key_env, max_model_len=max_model_len)
    target = check.from_record(records.load(records.resolve_name(name)), api_key_env=api_key_env)
    if model is not None:
        target = replace(target, model=model)
    return replace(target, max_model_len=max_model_len) if max_model_len is not None else target


def check_cmd(
    name: NameArg = None,
    url: Annotated[str | None, typer.Option("--url", help="Check any OpenAI-compatible server (base URL).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name to check (default: the served one).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="endpoint, completion, streaming, tools, auth "
                                                        "(+ reasoning with a reasoning parser). The default.")] = False,
    full: Annotated[bool, typer.Option("--full", help="Every check, needle and parity included.")] = False,
    only: Annotated[str | None, typer.Option("--only", help="Just these checks, comma-separated.")] = None,
    json_out: JsonOpt = False,
    api_key_env: Annotated[str | None, typer.Option("--api-key-env", help="Env var holding the API key.")] = None,
    max_model_len: Annotated[int | None, typer.Option("--max-model-len",
                                                      help="Expected max_model_len (default: the recipe's).")] = None,
    reference: Annotated[str | None, typer.Option("--reference", help="Parity reference: transcript FILE, URL, or "
                                                                      "another run's name.")] = None,
    save_reference: Annotated[Path | None, typer.Option("--save-reference", help="Write this deployment's greedy "
                                                         "answers to FILE (a later --reference) and exit.")] = None,
    needle_lengths: Annotated[str | None, typer.Option("--needle-lengths", help="Prompt lengths in the model's "
                                                       "tokens, e.g. 1024,4000 (default: 1/4 and all of the "
                                                       "context).")] = None,
    needle_depths: Annotated[str | None, typer.Option("--needle-depths", help="Needle depths, e.g. 0.1,0.5,0.9.")
                             ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for the needle codes.")] = None,
) -> None:
    """Prove a deployment works: known answers, streaming, tool calls, long-context recall, parity, auth."""
    if quick and full:
        raise CheckError("--quick and --full exclude each other", fix="Pass one of them.")
    target = _target(name, url, model, api_key_env, max_model_len)
    if save_reference is not None:
        transcript = check.save_reference(target)
        transcript.save(save_reference)
        if json_out:
            print_json({"saved": str(save_reference), **transcript.to_json()})
        else:
            console.print(f"wrote {save_reference}: {len(transcript.answers)} greedy answers from "
                          f"{transcript.target.get('model')} at {transcript.target.get('base_url')}")
        return
    ref: check.Transcript | check.Target | None = None
    if reference is not None:
        found = reference_from(reference, api_key_env=api_key_env)
        ref = check.Transcript.load(found) if isinstance(found, Path) else found
    opts = check.Options(needle_lengths=_ints(needle_lengths, "--needle-lengths"),
                         needle_depths=_floats(needle_depths, "--needle-depths") or check.Options().needle_depths,
                         reference=ref, only=_only(only), seed=seed)
    tier: check.Tier = "full" if full else "quick"

    def show(r: check.CheckResult) -> None:
        err_console.print(f"[{_STYLE[r.status]}]{r.status:>4}[/] {r.id:<10} {r.seconds:6.1f} s", highlight=False)

    report = check.run(target, tier, opts, on_result=None if json_out else show)
    if target.run_name:  # kept with the run: a later `forklift canary` repeats and compares it
        save_check(target.run_name, report.to_json(), records.load(target.run_name).run_id)
    if json_out:
        print_json(report.to_json())
    else:
        _summary(report)
    if not report.passed:
        raise typer.Exit(1)


def _summary(report: check.Report) -> None:
    table = Table("check", "status", "s", "summary", show_lines=False)
    for r in report.checks:
        table.add_row(r.id, f"[{_STYLE[r.status]}]{r.status}[/]", f"{r.seconds:.1f}", r.summary)
    console.print(table)
    for r in report.checks:
        if r.fix and r.status in ("fail", "warn"):
            console.print(f"[bold]fix[/] ({r.id}): {r.fix}", highlight=False, soft_wrap=True)
    failed = [r.id for r in report.checks if r.status == "fail"]
    where = report.target.get("run") or report.target.get("base_url")
    if failed:
        console.print(f"[bold red]FAILED[/] {where}: {', '.join(failed)} ({report.tier}, {report.seconds:.1f} s); "
                      "`--json` shows each request and response")
    else:
        console.print(f"[green]passed[/] {where} ({report.tier}, {report.seconds:.1f} s)")


def register(app: typer.Typer) -> None:
    app.command("check")(check_cmd)
