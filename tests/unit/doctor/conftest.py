"""Excerpts of real logs, each with a source file naming where it came from and what it shows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parents[2] / "data" / "doctor"


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
