"""The rules under pull, sync and image sync that need no second host: what counts as matching, where a node's
Hugging Face cache is, the data-network address, the registry name, the pins, and preflight's image digest check."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from forklift import recipe as recipes
from forklift.cluster.preflight import run_preflight
from forklift.distribution.copy import compare
from forklift.distribution.images import registry_ref
from forklift.distribution.modelfiles import Listing, hub_cache, pulled_commit
from forklift.distribution.transfer import data_address, pipe, route
from forklift.errors import TransferError
from forklift.recipe.schema import Node
from forklift.runner import FakeRunner, LocalRunner


def test_compare_keeps_partials_and_flags_wrong_files() -> None:
    ref = Listing("/src", {"config.json": 10, "a.safetensors": 100, "b.safetensors": 100, "c.safetensors": 100,
                           "d.safetensors": 100}, {"config.json": "h1"})
    have = Listing("/dst", {"config.json": 10, "a.safetensors": 40, "b.safetensors": 120, "c.safetensors": 100},
                   {"config.json": "h2"})
    diff = compare(sorted(ref.sizes), have, ref)
    assert diff.missing == ["d.safetensors"] and diff.partial == ["a.safetensors"]  # a partial is continued
    assert diff.wrong == ["b.safetensors", "config.json"]  # longer than the source; config differs by sha256
    sums = {"c.safetensors": "good"}
    assert "c.safetensors" not in compare(["c.safetensors"], have, ref).to_send  # same size: matching without sums
    assert compare(["c.safetensors"], have, ref, sums, {"c.safetensors": "bad"}).wrong == ["c.safetensors"]
    assert compare(["c.safetensors"], have, ref, sums, {"c.safetensors": "good"}).to_send == []


def test_hub_cache_follows_huggingface_hub_order() -> None:
    def host(stdout: str) -> FakeRunner:
        return FakeRunner("n").on(["sh", "-c"], stdout=stdout)

    assert hub_cache(host("\n\n\n"), {}, "/home/u") == "/home/u/.cache/huggingface/hub"
    assert hub_cache(host("\n\n/xdg\n"), {}, "/home/u") == "/xdg/huggingface/hub"
    assert hub_cache(host("\n/hf\n/xdg\n"), {}, "/home/u") == "/hf/hub"
    assert hub_cache(host("/hc\n/hf\n\n"), {}, "/home/u") == "/hc"
    assert hub_cache(host("/hc\n/hf\n\n"), {"HF_HUB_CACHE": "~/rc"}, "/home/u") == "/home/u/rc"  # recipe first
    assert hub_cache(host("\n\n\n"), {"HF_HOME": "/r"}, "/home/u") == "/r/hub"


def test_data_address_uses_the_ssh_user_on_the_data_ip() -> None:
    assert data_address(Node(host="b", ssh="me@spark-b:2222", data_ip="10.0.0.2")) == ("me@10.0.0.2", 2222)
    assert data_address(Node(host="b", ssh="spark-b", data_ip="10.0.0.2")) == ("10.0.0.2", None)
    assert data_address(Node(host="b", ssh="me@spark-b")) == ("me@spark-b", None)


def test_route_never_sends_a_node_to_itself_through_localhost() -> None:
    node = FakeRunner("a")
    assert route(LocalRunner(), node, Node(host="b", ssh="b"), None) == "the source is this machine"
    assert route(node, LocalRunner(), Node(), None) == "the target is this machine"
    assert node.calls == []
    # the inner ssh fails with 255 while the outer session is fine: a routing answer, not "node a is down"
    refused = FakeRunner("a").on(["sh", "-c"], stdout="node-ssh-exit 255\n", stderr="Permission denied (publickey).")
    problem = route(refused, FakeRunner("b"), Node(host="b", ssh="root@b", data_ip="10.0.0.2"), "/etc/fl_ssh")
    assert problem is not None and "root@10.0.0.2" in problem and "Permission denied" in problem
    assert refused.calls[0].argv[-2:] == ("root@10.0.0.2", "true") and "/etc/fl_ssh" in refused.calls[0].argv
    works = FakeRunner("a").on(["sh", "-c"], stdout="node-ssh-exit 0\n")
    assert route(works, FakeRunner("b"), Node(host="b", ssh="root@b", data_ip="10.0.0.2"), None) is None


def test_registry_ref_drops_the_images_own_registry() -> None:
    assert registry_ref("10.0.0.1:5000", "vllm/vllm-openai:v0.26.0") == "10.0.0.1:5000/vllm/vllm-openai:v0.26.0"
    assert registry_ref("reg:5000/", "nvcr.io/nvidia/vllm:25.09") == "reg:5000/nvidia/vllm:25.09"
    assert registry_ref("reg:5000", "localhost/x:1") == "reg:5000/x:1"
    assert registry_ref("reg:5000", "img:1") == "reg:5000/img:1"


def test_pulled_commit_comes_from_the_snapshot_or_the_pull_pin(tmp_path: Path) -> None:
    commit = "ab" * 20
    local = LocalRunner()
    assert pulled_commit(local, f"/x/hub/models--o--n/snapshots/{commit}") == commit
    pulled = tmp_path / "pulled"
    (pulled / ".forklift").mkdir(parents=True)
    (pulled / ".forklift" / "source.json").write_text(json.dumps({"repo": "o/n", "commit": commit}))
    assert pulled_commit(local, str(pulled)) == commit
    (tmp_path / "copied").mkdir()
    assert pulled_commit(local, str(tmp_path / "copied")) is None
    assert pulled_commit(local, str(tmp_path / "absent")) is None


def _docker_node(host: str, image_id: str) -> FakeRunner:
    return FakeRunner(host).on(["docker", "image", "inspect"], stdout=image_id + "\n") \
        .on(["docker", "run"], stdout="vllm 0.26.0\n").on(["sh", "-c", 'printf %s "$HOME"'], stdout="/root")


def test_preflight_names_the_node_whose_image_digest_differs() -> None:
    r = recipes.load("default", [
        "runtime={kind: docker, image: 'img:1', gpus: null, mounts: ['~/py:/py:ro']}", "serve.host=0.0.0.0",
        "nodes=[{host: a, ssh: root@10.0.0.1}, {host: b, ssh: root@10.0.0.2}, {host: c, ssh: root@10.0.0.3}]"])
    same, other = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    runners = {0: _docker_node("a", same), 1: _docker_node("b", same), 2: _docker_node("c", other)}
    report = run_preflight(r, runners, {0: "/m", 1: "/m", 2: "/m"})
    bad = [c for c in report.checks if c.id == "image digest"]
    assert [(c.host, c.status) for c in bad] == [("c", "fail")]
    assert "img:1" in bad[0].summary and "sha256:222" in bad[0].summary
    assert bad[0].fix is not None and "forklift image sync img:1" in bad[0].fix and "--from a" in bad[0].fix
    assert report.image_digests == {"a": same, "b": same, "c": other}
    assert [c.status for c in report.checks if c.id == "runtime"] == ["ok", "ok", "ok"]  # mounts with '~' work
    runners[2] = _docker_node("c", same)
    assert not [c for c in run_preflight(r, runners, {0: "/m", 1: "/m", 2: "/m"}).checks if c.id == "image digest"]


def test_pipe_continues_a_file_and_names_the_side_that_failed(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(bytes(range(256)) * 4000)
    dst.write_bytes(src.read_bytes()[:300_000])  # what an interrupted relay left
    seen: list[int] = []
    moved = pipe(LocalRunner(), ["tail", "-c", "+300001", str(src)], LocalRunner(),
                 ["sh", "-c", 'cat >> "$1"', "sh", str(dst)], on_bytes=seen.append, cancel=threading.Event())
    assert moved == sum(seen) == 1_024_000 - 300_000 and dst.read_bytes() == src.read_bytes()
    with pytest.raises(TransferError, match="reading on localhost"):
        pipe(LocalRunner(), ["tail", "-c", "+1", str(tmp_path / "absent")], LocalRunner(),
             ["sh", "-c", "cat >/dev/null"], on_bytes=seen.append, cancel=threading.Event())
