"""Cluster inventory: the recipe's ``nodes``, or a named cluster file the recipe refers to.

A cluster file is YAML with ``nodes:`` (the same Node fields as a recipe) and optionally ``network:``;
``cluster: NAME`` in a recipe looks for ``$FORKLIFT_HOME/clusters/NAME.yaml`` (or takes a path).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError

from forklift import paths
from forklift.errors import RecipeError
from forklift.recipe.load import read_text
from forklift.recipe.schema import Network, Node, Recipe, Strict
from forklift.yamlio import load_user


class ClusterFile(Strict):
    """A reusable set of nodes."""

    description: str | None = None
    nodes: list[Node] = Field(min_length=1)
    network: Network | None = None


def clusters_dir() -> Path:
    return paths.home() / "clusters"


def find(ref: str, base: Path | None = None) -> Path:
    """A cluster file: a path (beside the recipe that names it, as ``extends`` is, then from here), or a name
    under $FORKLIFT_HOME/clusters/."""
    as_path = Path(ref).expanduser()
    beside = [base / as_path] if base is not None and not as_path.is_absolute() else []
    for cand in (*beside, as_path, clusters_dir() / f"{ref}.yaml", clusters_dir() / ref):
        if cand.is_file():
            return cand
    known = sorted(p.stem for p in clusters_dir().glob("*.yaml")) if clusters_dir().is_dir() else []
    file = ref if ref.endswith((".yaml", ".yml")) else f"{ref}.yaml"
    where = f"{beside[0]}, " if beside else ""
    raise RecipeError(
        f"cluster '{ref}' not found (nothing at {where}{as_path} or {clusters_dir()}/{file})",
        fix=("Known clusters: " + ", ".join(known)) if known else
        f"Write {clusters_dir()}/{file} with a `nodes:` list, or list the nodes in the recipe.",
    )


def load_cluster(ref: str) -> ClusterFile:
    path = find(ref)
    try:
        data: Any = load_user(read_text(path)) or {}
        return ClusterFile.model_validate(data)
    except (yaml.YAMLError, ValidationError, RecursionError, ValueError) as exc:
        raise RecipeError(f"{path}: invalid cluster file: {exc}", source=str(path),
                          fix="A cluster file has `nodes:` (host, ssh, hardware, data_ip, model_path).") from exc


def apply_cluster_file(recipe: Recipe, base: Path | None = None) -> tuple[Recipe, str | None]:
    """The recipe with its cluster file's nodes (and network) in place, and the file's path; the recipe
    unchanged (and None) without ``cluster:``. ``base``: the recipe file's folder."""
    if recipe.cluster is None:
        return recipe, None
    path = find(recipe.cluster, base)
    cluster = load_cluster(str(path))
    update: dict[str, Any] = {"nodes": cluster.nodes}
    if cluster.network is not None:
        update["network"] = cluster.network
    return recipe.model_copy(update=update), str(path)
