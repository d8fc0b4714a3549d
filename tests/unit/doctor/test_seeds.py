"""The seeds' walls and seed 002's troubleshooting rows: each diagnosed with the seed's own fix.

The inputs are the seeds' own sentences (copied into tests/data/doctor/seeds/walls.yaml with their line
numbers) and real log lines of the same failures; ``fix`` lists what the seed's fix says."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from forklift.doctor import Context, Source, diagnose_sources, scan_text, to_checks

from .conftest import DATA

WALLS: list[dict[str, Any]] = yaml.safe_load((DATA / "seeds" / "walls.yaml").read_text())["walls"]


@pytest.mark.parametrize("wall", WALLS, ids=[w["name"] for w in WALLS])
def test_each_wall_is_diagnosed_with_the_seeds_fix(wall: dict[str, Any]) -> None:
    report = diagnose_sources([Source(wall["name"], scan_text([wall["text"]]))])
    top = report.top
    assert top is not None, f"{wall['name']}: no finding"
    assert top.category == wall["category"], f"{wall['name']}: {top.category} ({top.rule})"
    assert not report.unsure, f"{wall['name']}: unsure at p={top.confidence:.2f}"
    missing = [k for k in wall["fix"] if k not in top.fix]
    assert missing == [], f"{wall['name']}: the fix does not say {missing}: {top.fix}"
    check = to_checks(report)[0]
    assert check.status == "fail" and check.fix == top.fix


def test_the_arity_wall_names_the_catalog_patch_when_the_recipe_lacks_it() -> None:
    text = next(w["text"] for w in WALLS if w["name"] == "seed000-wall2-weight-loader-arity")
    report = diagnose_sources([Source("w", scan_text([text]))], Context(patches_wanted=("pp-shard-filter",)))
    assert report.top is not None and "Add `patches: [kv-scale-loader-args]`" in report.top.fix
