"""Which Runner reaches which node."""

from __future__ import annotations

from forklift.cluster.runner import LocalRunner, Runner
from forklift.cluster.ssh import SshRunner
from forklift.recipe.schema import Node


def runner_for(node: Node) -> Runner:
    if node.is_local:
        return LocalRunner()
    return SshRunner(node.ssh or node.host, name=node.host)
