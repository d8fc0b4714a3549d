"""The namespace cluster, once per module: skipped with the reason when this machine cannot host it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import netns


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[netns.NetCluster]:
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(f"namespace cluster unavailable: {reason}")
    tmp: Path = tmp_path_factory.mktemp("netcluster")
    cluster = netns.start(tmp, str(os.getpid() % 100000))
    try:
        yield cluster
    finally:
        netns.stop(cluster)
        remove_node_run_dirs(tmp / "home" / "runs")


def remove_node_run_dirs(runs: Path) -> None:
    """The ranks' run directories on the nodes (same filesystem here): only the ones our records name."""
    for record in runs.glob("*/record.json"):
        for rank in json.loads(record.read_text()).get("ranks", []):
            folder = Path(rank["log_path"]).parent
            if "/forklift/nodes/" in str(folder):
                shutil.rmtree(folder, ignore_errors=True)
