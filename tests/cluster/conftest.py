"""The namespace cluster, once per module: skipped with the reason when this machine cannot host it."""

from __future__ import annotations

import os
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
