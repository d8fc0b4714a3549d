"""Real log excerpts for doctor's tests: the round-1 excerpts (each with a source file naming where it came
from and what it shows) and the round-2 corpus (tests/data/doctor/corpus, its TRAIN split only: the
held-out split is for benchmarks/doctor_accuracy.py, never for tests that shape rules)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "doctor"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._doctor_corpus import Item, corpus_items  # noqa: E402


@dataclass(frozen=True)
class Excerpt:
    name: str
    log: Path
    source: str
    cites: str | None
    category: str | None
    rule: str | None


def excerpts(folder: str = "excerpts") -> list[Excerpt]:
    out = []
    for meta in sorted((DATA / folder).glob("*.source.yaml")):
        m = yaml.safe_load(meta.read_text())
        name = meta.name.removesuffix(".source.yaml")
        out.append(Excerpt(name, meta.with_name(f"{name}.log"), m["source"], m.get("cites"),
                           m["expect"]["category"], m["expect"]["rule"]))
    return out


def train_items() -> list[Item]:
    return corpus_items(("train",))


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _wide_consoles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's rich consoles are made once per process and keep the width they saw then; these tests read whole
    table cells (COLUMNS=250 in their runners), whichever test made the consoles first."""
    from forklift.cli import common

    for name in ("console", "err_console"):
        monkeypatch.setattr(getattr(common, name), "_width", 250)
