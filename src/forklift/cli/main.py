"""``forklift``: plan, launch, check, benchmark and diagnose vLLM deployments.

Commands load lazily: ``forklift plan`` imports the planner and nothing else, ``forklift --help`` imports no
command at all (the one-line help of each lives in ``COMMANDS``). Usage errors print typer's one-line message
and exit 2, whichever click typer carries.
"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Annotated, Any

from forklift.cli import boot  # first: pydantic's plugin switch, before any model is built

# isort: split
import typer
import typer.core
import typer.main

from forklift.cli.common import render_error, set_debug
from forklift.errors import ForkliftError, Terminated

# name -> (module under forklift.cli that registers it, one-line help). Order is `forklift --help`'s.
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("plan", "Predict per-rank memory, KV tokens, max context and decode speed for a recipe."),
    "hw": ("hw", "Show this machine or a node (memory, GPUs, matching profile), or the known profiles."),
    "probe": ("probe", "Measure a recipe's memory on its nodes (dummy weights, stop once the KV cache is sized)."),
    "render": ("render", "Print per-rank argv, env and start order, or a k8s manifest."),
    "up": ("up", "Start a deployment, detached; exit 0 once a streamed chat completion returns a token."),
    "status": ("status", "Show a run (or all runs): state, endpoint, ranks."),
    "logs": ("status", "Print (or follow) a rank's engine log, local or over SSH."),
    "top": ("top", "Watch runs live: requests, tok/s, TTFT / TPOT, KV cache, acceptance; node memory and GPUs."),
    "chat": ("chat", "Ask a running deployment one question (greedy) and print the answer."),
    "check": ("check", "Prove a deployment works: endpoint, completion, streaming, tools, auth, needle, parity."),
    "bench": ("bench", "Measure TTFT / TPOT / ITL and throughput against a run or a URL."),
    "compare": ("compare", "Compare two saved bench results (or check reports): per metric, change and interval."),
    "canary": ("canary", "Try a change (vLLM, image, setting) against the running baseline; keep it or roll back."),
    "tune": ("tune", "Measure candidate settings the plan says fit on a workload under an SLO; write the winner."),
    "monitor": ("monitor", "Export a run's Prometheus scrape config, alert rules and Grafana dashboard."),
    "doctor": ("doctor", "Say what broke a start and the fix, from a run, log files or stdin."),
    "supervise": ("supervise", "Keep a run serving: probe it, restart it whole with backoff and a cap, alert."),
    "service": ("service", "Install, show or remove the systemd unit that supervises a run from boot."),
    "stack": ("stack", "Several models on shared nodes: plan them together, start largest first, stop in reverse."),
    "gateway": ("gateway", "One OpenAI-compatible endpoint in front of runs: keys per person, usage, audit log."),
    "down": ("status", "Stop a run (and its supervisor) on every node and verify nothing is left."),
    "recipe": ("recipe", "List, show and validate recipes; print the recipe JSON Schema."),
    "model": ("model", "Prepare the bundled model; pull a Hub model onto a recipe's nodes; sync it between nodes."),
    "image": ("image", "Copy a container image to the nodes that lack its digest."),
    "node": ("node", "Prepare nodes: sysctl, swap, the OOM/page-cache guard. Checkable and reversible."),
    "net": ("net", "Network: find each node pair's link, measure it, write NCCL's settings."),
    "patch": ("patch", "vLLM source patches that know their versions: list, check, apply, revert."),
}


class _Listed(typer.core.TyperCommand):
    """A stand-in that carries a command's one-line help while the root help is drawn."""


class LazyGroup(typer.core.TyperGroup):
    """Imports a command's module only when that command runs (or its own help is asked for)."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            return _Listed(name=cmd_name, help=entry[1], short_help=entry[1], callback=lambda: None)
        holder = typer.Typer()
        importlib.import_module(f"forklift.cli.{entry[0]}").register(holder)
        built = typer.main.get_command(holder)
        found = built.get_command(ctx, cmd_name) if isinstance(built, typer.core.TyperGroup) else built
        boot.resume_gc()  # the command is loaded: it runs with the collector on
        return _quiet_flags(found)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def _quiet_flags(command: Any) -> Any:
    """On/off flags show no value type in help (typer >= 0.26 prints '--json <bool>' otherwise)."""
    for param in getattr(command, "params", []):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    make_help = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _quiet_flags(sub)
    return command


app = typer.Typer(
    name="forklift",
    cls=LazyGroup,
    help="Put large open models on hardware you own: plan, up, check, bench, doctor, down.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        from forklift.version import __version__

        print(f"forklift {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.", metavar="")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print forklift's version and exit.", metavar="",
                                          callback=_version, is_eager=True)] = False,
) -> None:
    set_debug(debug)


def _usage_error(exc: BaseException) -> bool:
    """A click usage/parameter error, from click itself or the copy typer ships (typer._click)."""
    return any(cls.__name__ == "ClickException" and cls.__module__.endswith("click.exceptions")
               for cls in type(exc).__mro__)


_terminated: list[bool] = []


def _on_sigterm(signum: int, frame: object) -> None:
    _terminated.append(True)  # click turns the interrupt into Abort on its way out: remember which signal it was
    raise Terminated()


def main() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)
    boot.pause_gc()
    try:
        _main()
    finally:
        boot.end_gc()


def _main() -> None:
    debug = "--debug" in sys.argv
    try:
        rc = _quiet_flags(typer.main.get_command(app))(standalone_mode=False)
    except ForkliftError as exc:
        if debug:
            raise
        render_error(exc)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(143 if _terminated else 130)
    except Exception as exc:
        if _usage_error(exc) and not debug:
            exc.show()  # type: ignore[attr-defined]
            sys.exit(int(getattr(exc, "exit_code", 2)))
        raise
    if _terminated and rc == 130:  # typer answers an interrupt with Exit(130), which click returns: say SIGTERM
        rc = 143
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
