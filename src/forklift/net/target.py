"""What ``forklift net`` checks: a recipe (its nodes and network, its Python for the NCCL probe) or a cluster file
(nodes and network alone), and which file ``net apply`` writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from forklift.errors import RecipeError, RecipeNotFoundError
from forklift.recipe import cluster_file
from forklift.recipe.deployment import resolve
from forklift.recipe.load import read_text
from forklift.recipe.schema import Network, Recipe

CLUSTER_MODEL = "cluster-file"
"""The placeholder model source of the recipe a cluster file is checked as (net never reads the model)."""


@dataclass(frozen=True)
class Target:
    recipe: Recipe
    kind: Literal["recipe", "cluster"]
    origin: str
    """What the user named: ``bundled:NAME``, a recipe path or a cluster file path."""
    writes: Path | None
    """The file ``net apply --write`` edits: the cluster file when the nodes come from one, else the recipe file;
    None for a bundled recipe."""


def _peek(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(read_text(path))
    except (yaml.YAMLError, RecursionError):  # the recipe loader that follows names what is wrong
        return {}
    return data if isinstance(data, dict) else {}


def _cluster_target(path: Path) -> Target:
    cluster = cluster_file.load_cluster(str(path))
    recipe = Recipe.model_validate({"name": path.stem, "model": {"source": CLUSTER_MODEL},
                                    "nodes": [n.model_dump() for n in cluster.nodes],
                                    "network": (cluster.network or Network()).model_dump()})
    return Target(recipe, "cluster", str(path), path)


def load(ref: str, sets: list[str] | None = None) -> Target:
    """A recipe (bundled name or path) or a cluster file (path, or a name under $FORKLIFT_HOME/clusters/)."""
    as_path = Path(ref).expanduser()
    if as_path.is_file():
        data = _peek(as_path)
        if "nodes" in data and "model" not in data and "extends" not in data:
            return _cluster_target(as_path)
    try:
        deployment = resolve(ref, sets or [], facts=False)
    except RecipeNotFoundError:
        try:
            return _cluster_target(cluster_file.find(ref))
        except RecipeError:
            raise RecipeError(f"'{ref}' is neither a recipe nor a cluster file", fix="Pass a recipe (bundled "
                              "name or YAML path) or a cluster file with `nodes:`.") from None
    origin = deployment.origin
    writes: Path | None = None
    if deployment.cluster_file:
        writes = Path(deployment.cluster_file)
    elif not origin.startswith("bundled:"):
        writes = Path(origin)
    return Target(deployment.recipe, "recipe", origin, writes)
