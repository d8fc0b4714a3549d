"""Helpers for planner unit tests: recipes built from a config.json in a temporary model dir."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from forklift.recipe.load import validate
from forklift.recipe.schema import Recipe

CONFIGS = Path(__file__).resolve().parents[3] / "tests" / "data" / "configs"


def cdiv(a: int, b: int) -> int:
    """Ceiling division, written out here so expectations never borrow the planner's own helper."""
    return -(-a // b)


def recipe_for(tmp: Path, config: Path | dict[str, Any], *, hardware: str = "h200", nodes: int = 1, tp: int = 1,
               pp: int = 1, dcp: int = 1, **serve: Any) -> Recipe:
    model = tmp / f"model-{len(list(tmp.glob('model-*')))}"
    model.mkdir()
    if isinstance(config, Path):
        shutil.copy(config, model / "config.json")
    else:
        (model / "config.json").write_text(json.dumps(config))
    return validate({
        "model": {"source": str(model), "load_format": "dummy"},
        "nodes": [{"host": f"node{i}", "hardware": hardware} for i in range(nodes)],
        "parallel": {"tp": tp, "pp": pp, "dcp": dcp},
        "serve": serve,
    })
