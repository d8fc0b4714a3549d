"""Shared fixtures: every test gets its own FORKLIFT_HOME; the model cache stays shared."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# FORKLIFT_HOME isolates caches too, so name the one cache every test (and every forklift the tests start,
# session fixtures included) shares: the prepared bundled model and vLLM release sources live there
# (`make fixtures` fills it).
os.environ.setdefault("FORKLIFT_CACHE", str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                            / "forklift"))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "forklift-home"
    monkeypatch.setenv("FORKLIFT_HOME", str(home))
    yield home
