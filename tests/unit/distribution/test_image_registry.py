"""image sync through a registry, with fake nodes: one push from the source, a pull and tag on each node that
lacks the digest, nothing sent to a node that has it, and the digest checked afterwards. (The save | ssh load
paths run for real in tests/cluster/test_model_transfer.py; no registry is reachable here.)"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from forklift import recipe as recipes
from forklift.distribution.images import ImageOptions, sync_image
from forklift.errors import TransferError
from forklift.recipe.schema import Recipe
from forklift.runner import FakeRunner

IMAGE = "vllm/vllm-openai:v0.26.0"
REF = "10.0.0.1:5000/vllm/vllm-openai:v0.26.0"
DIGEST = "sha256:" + "a" * 64


def _node(host: str, has: str | None, loads: str | None = DIGEST) -> FakeRunner:
    """A node whose daemon has ``has`` for IMAGE, and ``loads`` once it has pulled from the registry."""
    fake = FakeRunner(host)

    def inspect(argv: Sequence[str]) -> str:
        pulled = fake.ran("docker", "tag", REF, IMAGE)
        value = loads if pulled else has
        return f"{value}\n" if value else ""

    fake.on(lambda a: list(a[:3]) == ["docker", "image", "inspect"] and "{{.Id}}" in a, stdout=inspect)
    fake.on(lambda a: list(a[:3]) == ["docker", "image", "inspect"] and "{{.Size}}" in a, stdout="1000\n")
    return fake


def _recipe() -> Recipe:
    return recipes.load("default", ["nodes=[{host: a, ssh: root@10.0.0.1}, {host: b, ssh: root@10.0.0.2}, "
                                    "{host: c, ssh: root@10.0.0.3}]"])


def test_registry_path_pushes_once_and_pulls_where_the_digest_is_missing() -> None:
    a, b, c = _node("a", DIGEST), _node("b", None), _node("c", DIGEST)
    report = sync_image(IMAGE, _recipe(), {0: a, 1: b, 2: c}, options=ImageOptions(registry="10.0.0.1:5000"))
    assert [(n.host, n.method) for n in report.nodes] == [("a", "source"), ("b", "registry"), ("c", "skip")]
    assert [c.argv for c in a.calls if c.argv[:2] in (("docker", "tag"), ("docker", "push"))] == [
        ("docker", "tag", IMAGE, REF), ("docker", "push", REF)]
    assert [c.argv[:3] for c in b.calls if c.argv[1] in ("pull", "tag")] == [
        ("docker", "pull", REF), ("docker", "tag", REF)]
    assert not [call for call in c.calls if call.argv[1] in ("pull", "load", "tag")]  # skipped: nothing sent
    assert report.digest == DIGEST and report.nodes[1].after == DIGEST


def test_a_pull_that_lands_another_digest_fails_naming_the_node() -> None:
    a, b = _node("a", DIGEST), _node("b", None, loads="sha256:" + "b" * 64)
    r = recipes.load("default", ["nodes=[{host: a, ssh: root@10.0.0.1}, {host: b, ssh: root@10.0.0.2}]"])
    report = sync_image(IMAGE, r, {0: a, 1: b}, options=ImageOptions(registry="10.0.0.1:5000"))
    assert report.nodes[1].error is not None and "not sha256:aaaa" in report.nodes[1].error
    with pytest.raises(TransferError, match="b: "):
        report.raise_if_failed()


def test_no_node_has_the_image() -> None:
    nodes = {0: _node("a", None), 1: _node("b", None), 2: _node("c", None)}
    with pytest.raises(TransferError, match="has no image") as err:
        sync_image(IMAGE, _recipe(), nodes, options=ImageOptions(source="b"))
    assert "b has no image" in str(err.value)
