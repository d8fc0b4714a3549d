"""Shared CLI pieces: consoles, options, JSON output, error rendering."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from forklift.errors import ForkliftError

if TYPE_CHECKING:
    from rich.console import Console

    console: Console
    err_console: Console


def __getattr__(name: str) -> Any:
    """``console`` and ``err_console`` (rich) are made at first use: ``plan --json`` never draws (~30 ms of rich)."""
    if name not in ("console", "err_console"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    made = globals()[name] = Console(stderr=name == "err_console")
    return made


JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON to stdout.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a recipe field: --set serve.max_model_len=8192 (repeatable)."),
]
RecipeArg = Annotated[
    str | None, typer.Argument(help="Bundled recipe name or path to a recipe YAML (default: 'default').")
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Go on when the plan says vLLM would reject the layout or "
                                                       "the model does not fit.")]
ApplyOpt = Annotated[bool, typer.Option("--apply", help="Take the plan's advice: the balanced PP split and the first "
                                                       "step that makes it fit.")]
NameOpt = Annotated[str | None, typer.Option("--name", "-n", help="Run name (default: the only run, or 'default').")]
NameArg = Annotated[str | None, typer.Argument(help="Run name (default: the only run, or 'default').")]

_state: dict[str, bool] = {"debug": False}


def set_debug(value: bool) -> None:
    _state["debug"] = value


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def render_error(exc: ForkliftError) -> None:
    from rich.markup import escape

    err_console = globals().get("err_console") or __getattr__("err_console")
    err_console.print(f"[bold red]{type(exc).__name__}[/]: {escape(exc.message)}", highlight=False, markup=True,
                      soft_wrap=True)
    tail = getattr(exc, "log_tail", None)
    if tail:
        err_console.print("[dim]last log lines:[/]")
        for line in tail:
            err_console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    if exc.fix:
        err_console.print(f"[bold]fix[/]: {escape(exc.fix)}", highlight=False, soft_wrap=True)


def fail(exc: ForkliftError) -> typer.Exit:
    render_error(exc)
    return typer.Exit(exc.exit_code)
