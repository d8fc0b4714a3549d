"""What every ``forklift`` process sets before pydantic builds its first model."""

from __future__ import annotations

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
