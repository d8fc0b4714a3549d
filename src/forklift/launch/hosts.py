"""Which Runner reaches which node."""

from __future__ import annotations

from forklift.recipe.schema import Node, Recipe
from forklift.runner import LocalRunner, Runner
from forklift.runner.ssh import SshRunner


def runner_for(node: Node, *, ssh_config: str | None = None, timeout_s: float = 60.0) -> Runner:
    if node.is_local:
        return LocalRunner()
    return SshRunner(node.ssh or node.host, name=node.host, ssh_config=ssh_config, default_timeout=timeout_s)


def runners_for(recipe: Recipe, *, ssh_config: str | None = None) -> dict[int, Runner]:
    """One runner per node, keyed by node index."""
    return {i: runner_for(n, ssh_config=ssh_config, timeout_s=recipe.timeouts.ssh_s)
            for i, n in enumerate(recipe.nodes)}
