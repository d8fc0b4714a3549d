"""Where forklift keeps state and caches. ``FORKLIFT_HOME`` overrides the state dir (tests use it)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """State dir: ``$FORKLIFT_HOME`` or ``~/.local/state/forklift``."""
    env = os.environ.get("FORKLIFT_HOME")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "forklift"


def runs_dir() -> Path:
    return home() / "runs"


def cache_dir() -> Path:
    """Caches (prepared models, vLLM release sources, calibrations): ``$FORKLIFT_CACHE``; else
    ``$FORKLIFT_HOME/cache`` when FORKLIFT_HOME is set (one home is one isolated forklift); else
    ``~/.cache/forklift``."""
    env = os.environ.get("FORKLIFT_CACHE")
    if env:
        return Path(env)
    home_env = os.environ.get("FORKLIFT_HOME")
    if home_env:
        return Path(home_env) / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forklift"


def models_dir() -> Path:
    return cache_dir() / "models"
