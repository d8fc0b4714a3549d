"""What every ``forklift`` process sets up first: pydantic's plugin switch (before any model is built) and the
cycle collector's pause while a command loads."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import types
from typing import Any

# pydantic scans every installed distribution's entry points for plugins at its first model (~15 ms of every
# command's start); forklift uses none.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def _no_plugin_loader() -> None:
    """With plugins off, pydantic's ``plugin._loader.get_plugins()`` returns () without looking, but importing that
    module still imports ``importlib.metadata`` (email, zipfile, csv: ~15 ms of a cold command). Stand in for it
    with a module whose ``get_plugins`` returns the same (); any other name comes from the real module."""
    if os.environ["PYDANTIC_DISABLE_PLUGINS"] not in ("__all__", "1", "true"):
        return
    name = "pydantic.plugin._loader"
    stub = types.ModuleType(name)

    def get_plugins() -> tuple[()]:
        return ()

    def real(attr: str) -> Any:  # a pydantic that wants more than get_plugins gets its own module back
        if attr.startswith("__"):  # the import system asks for __path__ and the like
            raise AttributeError(attr)
        sys.modules.pop(name, None)
        return getattr(importlib.import_module(name), attr)

    stub.get_plugins = get_plugins  # type: ignore[attr-defined]
    stub.__getattr__ = real  # type: ignore[method-assign]
    sys.modules.setdefault(name, stub)


_no_plugin_loader()


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

