"""``resolve(ref, overrides) -> Deployment``: where every recipe-taking command starts.

A Deployment is the recipe as resolved (``extends`` chain, ``--set`` overrides, the cluster file's nodes and
network in place) plus what forklift already knows about those nodes (facts measured earlier with
``forklift hw --node``). It never touches a node; ``plan``, ``render`` and ``up`` take it from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from forklift.hardware import facts as node_facts
from forklift.hardware.facts import MeasuredNode
from forklift.recipe.load import apply_overrides, load_raw, validate
from forklift.recipe.schema import Node, Recipe


class Deployment(BaseModel):
    """A recipe resolved against its cluster and the known facts of its nodes. Immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recipe: Recipe
    origin: str = "<recipe>"
    """Where the recipe came from: ``bundled:NAME`` or a file path."""
    overrides: list[str] = Field(default_factory=list)
    """The ``--set`` items applied, in order."""
    cluster_file: str | None = None
    """The cluster file whose nodes replaced the recipe's, when ``cluster:`` named one."""
    facts: dict[str, MeasuredNode] = Field(default_factory=dict)
    """Measured facts per node host (``forklift hw --node``); a host without facts is absent."""

    @property
    def name(self) -> str:
        return self.recipe.name or "default"

    @property
    def nodes(self) -> list[Node]:
        return self.recipe.nodes

    @property
    def head(self) -> Node:
        return self.recipe.head

    def with_sets(self, sets: Sequence[str]) -> Deployment:
        """The same deployment with more ``--set`` items applied (advice, --apply); facts are kept."""
        if not sets:
            return self
        data = apply_overrides(self.recipe.model_dump(mode="json"), sets)
        recipe = validate(data, self.origin, overrides=sets)
        return self.model_copy(update={"recipe": recipe, "overrides": [*self.overrides, *sets]})


def known_facts(recipe: Recipe) -> dict[str, MeasuredNode]:
    out: dict[str, MeasuredNode] = {}
    for node in recipe.nodes:
        found = node_facts.load(node.host)
        if found is not None:
            out[node.host] = found
    return out


def from_recipe(recipe: Recipe, *, origin: str | None = None, overrides: Sequence[str] = (),
                facts: bool = True) -> Deployment:
    """A Deployment from a Recipe object (library callers): applies its cluster file and known facts."""
    resolved, cluster_path = recipe, None
    if recipe.cluster is not None:  # the cluster-file reader (its own pydantic model) loads only for one
        from forklift.recipe.cluster_file import apply_cluster_file

        shown = Path(origin).expanduser() if origin else None
        resolved, cluster_path = apply_cluster_file(recipe, shown.parent if shown and shown.is_file() else None)
    return Deployment(recipe=resolved, origin=origin or (f"bundled:{recipe.name}" if recipe.name else "<recipe>"),
                      overrides=list(overrides), cluster_file=cluster_path,
                      facts=known_facts(resolved) if facts else {})


def resolve(ref: str | None = None, overrides: Sequence[str] = (), *, facts: bool = True) -> Deployment:
    """Load a recipe (bundled name or path), resolve ``extends``, apply ``--set`` overrides, put the cluster
    file's nodes in place and attach the nodes' known facts. Raises RecipeError naming file, field and fix."""
    display, data = load_raw(ref, overrides)
    recipe = validate(data, display, overrides=overrides)
    return from_recipe(recipe, origin=display, overrides=overrides, facts=facts)


def dump(deployment: Deployment) -> dict[str, Any]:
    """JSON-ready form (what the run record stores)."""
    return deployment.model_dump(mode="json")
