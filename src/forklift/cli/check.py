"""``forklift check``: the acceptance suite against a run or any OpenAI-compatible URL.

Exit codes: 0 every check ok, warn or skip; 1 a check failed; 2 the suite could not run (no such run,
unreachable, not OpenAI-compatible, bad arguments).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from forklift.check import registry as _registry
from forklift.cli.common import JsonOpt, NameArg, console, print_json
from forklift.cli.status import load_run
from forklift.errors import CheckError

if TYPE_CHECKING:
    from forklift import check
    from forklift.endpoint import Target

COULD_NOT_RUN = 2


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


def _only(text: str | None) -> tuple[str, ...] | None:
    from forklift.check import registry

    if text is None:
        return None
    ids = [x for x in text.replace(" ", "").split(",") if x]
    known = registry.ids()
    bad = [x for x in ids if x not in known]
    if bad:
        raise CheckError(f"--only: unknown check(s) {', '.join(bad)}", fix="Choose from " + ", ".join(known))
    return tuple(ids)


def _target(name: str | None, url: str | None, model: str | None, api_key_env: str | None,
            max_model_len: int | None) -> Target:
    from forklift.endpoint import Target

    if url is not None:
        if name is not None:
            raise CheckError("pass a run NAME or --url, not both", fix="Drop one of them.")
        return Target.from_url(url, model=model, api_key_env=api_key_env, max_model_len=max_model_len)
    record = load_run(name, exit_code=COULD_NOT_RUN)
    return Target.from_record(record, model=model, api_key_env=api_key_env, max_model_len=max_model_len)


def _save_reference(target: Target, path: Path, json_out: bool) -> None:
    from forklift import check

    transcript = check.save_reference(target)
    transcript.save(path)
    if json_out:
        print_json({"saved": str(path), **transcript.to_json()})
    else:
        console.print(f"wrote {path}: {len(transcript.answers)} greedy answers from "
                      f"{transcript.target.get('model')} at {transcript.target.get('base_url')}")


def _options(reference: str | None, api_key_env: str | None, only: str | None, needle_lengths: str | None,
             needle_depths: str | None, seed: int | None, new_golden: bool) -> check.Options:
    from forklift import check

    ref: check.Transcript | Target | None = None
    if reference is not None:
        found = check.reference_from(reference, api_key_env=api_key_env)
        ref = check.Transcript.load(found) if isinstance(found, Path) else found
    return check.Options(needle_lengths=_ints(needle_lengths, "--needle-lengths"),
                         needle_depths=_floats(needle_depths, "--needle-depths") or check.Options().needle_depths,
                         reference=ref, only=_only(only), seed=seed, new_golden=new_golden)


def check_cmd(
    name: NameArg = None,
    url: Annotated[str | None, typer.Option("--url", help="Check any OpenAI-compatible server (base URL).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model name to check (default: the served one).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help=f"{_registry.quick_help()}; integrity's fast part. "
                                                        "The default.")] = False,
    full: Annotated[bool, typer.Option("--full", help=f"Every check: all integrity probes, "
                                                      f"{_registry.full_only_help()}, and plugins'.")] = False,
    only: Annotated[str | None, typer.Option("--only", help="Just these checks, comma-separated, at full depth "
                                                            "(with --quick: integrity's fast part).")] = None,
    json_out: JsonOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show each check's requests and responses.")
                       ] = False,
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
    new_golden: Annotated[bool, typer.Option("--new-golden", help="Replace the run's golden transcript with this "
                                                                  "check's greedy answers (when every check "
                                                                  "passes).")] = False,
) -> None:
    """Prove a deployment works: known answers, streaming, tool calls, output integrity, its golden answers,
    long-context recall, parity, auth.
    Exits 0 when every check is ok, warn or skip, 1 when one failed, 2 when the checks could not run."""
    from forklift import check
    from forklift.cli.check_table import print_checks, print_progress

    if quick and full:
        raise CheckError("--quick and --full exclude each other", fix="Pass one of them.")
    target = _target(name, url, model, api_key_env, max_model_len)
    if save_reference is not None:
        _save_reference(target, save_reference, json_out)
        return
    opts = _options(reference, api_key_env, only, needle_lengths, needle_depths, seed, new_golden)
    tier: check.Tier = "full" if full or (only is not None and not quick) else "quick"
    report = check.run(target, tier, opts, on_result=None if json_out else print_progress)
    if target.run_name:  # kept with the run: a later `forklift canary` repeats and compares it
        from forklift.record import load as load_record
        from forklift.record.runfiles import save_check

        save_check(target.run_name, report.to_json(), load_record(target.run_name).run_id)
    if json_out:
        print_json(report.to_json())
    else:
        print_checks(report.checks, seconds=True, verbose=verbose)
        _footer(report)
    if not report.passed:
        raise typer.Exit(1)


def _footer(report: check.Report) -> None:
    failed = [r.id for r in report.checks if r.status == "fail"]
    where = report.target.get("run") or report.target.get("base_url")
    if failed:
        console.print(f"[bold red]FAILED[/] {where}: {', '.join(failed)} ({report.tier}, {report.seconds:.1f} s); "
                      "`--verbose` shows each request and response")
    else:
        console.print(f"[green]passed[/] {where} ({report.tier}, {report.seconds:.1f} s)")


def register(app: typer.Typer) -> None:
    app.command("check")(check_cmd)
