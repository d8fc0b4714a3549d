"""Shared fixtures: every test gets its own FORKLIFT_HOME; the model cache stays shared."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "forklift-home"
    monkeypatch.setenv("FORKLIFT_HOME", str(home))
    yield home
