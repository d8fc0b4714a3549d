"""``forklift``: plan, launch, check, benchmark and diagnose vLLM deployments."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer

from forklift.cli.common import render_error, set_debug
from forklift.errors import ForkliftError

app = typer.Typer(
    name="forklift",
    help="Put large open models on hardware you own: plan, up, check, bench, doctor, down.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# Each module defines register(app). Order is the order of `forklift --help`.
COMMAND_MODULES = [
    "plan",
    "hw",
    "render",
    "up",
    "status",
    "chat",
    "check",
    "bench",
    "doctor",
    "recipe",
    "model",
    "image",
    "node",
    "patch",
]


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    set_debug(debug)


for _mod in COMMAND_MODULES:
    importlib.import_module(f"forklift.cli.{_mod}").register(app)


def main() -> None:
    debug = "--debug" in sys.argv
    try:
        rc = app(standalone_mode=False)
    except ForkliftError as exc:
        if debug:
            raise
        render_error(exc)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click usage errors and the like
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
