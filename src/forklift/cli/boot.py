"""What every ``forklift`` process sets up first: pydantic's plugin switch (before any model is built) and the
cycle collector's pause while a command loads."""

from __future__ import annotations

import atexit
import gc
import os
import sys

# pydantic scans every installed distribution's entry points for plugins at its first model (~15 ms of every
# command's start); forklift uses none.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


_gc = {"paused": False, "frozen": False, "at_exit": False}


def pause_gc() -> None:
    """Stop the cycle collector while a command loads, and skip its last full pass at exit.

    A cold command allocates ~36k objects while it imports (modules, classes, pydantic schemas, typer's
    parameters) and frees almost none of them: the collector's ~80 passes over them find nothing (~20 ms of a
    cold ``plan``), and at exit it searches all of them once more (~60 ms) just before the process frees
    everything anyway."""
    if not _gc["at_exit"]:
        atexit.register(gc.freeze)  # atexit runs before the interpreter's last collections, which skip frozen objects
        _gc["at_exit"] = True
    if gc.isenabled():
        gc.disable()
        _gc["paused"] = True


def resume_gc() -> None:
    """The command is loaded: what it imported moves to the collector's permanent generation (never searched
    again) and the collector runs as usual, so a long command (``up``, ``bench``) is collected as before."""
    if _gc["paused"]:
        gc.freeze()
        _gc["frozen"] = True
        gc.enable()
        _gc["paused"] = False


def end_gc() -> None:
    """When ``main`` returns (or raises): the collector on, and nothing left frozen (a caller that runs ``main``
    in its own process, as the tests do, keeps collecting what it frees)."""
    if _gc["paused"]:
        gc.enable()
        _gc["paused"] = False
    if _gc["frozen"]:
        gc.unfreeze()
        _gc["frozen"] = False


def _running_the_cli() -> bool:
    """Whether this process is ``forklift`` itself (the console script or ``python -m forklift.cli.main``), not a
    program or test that imports the CLI."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == "forklift.cli.main" or os.path.basename(sys.argv[0]) == "forklift"


if _running_the_cli():
    pause_gc()  # from the first import on; main() would pause it only after typer and rich have loaded

