from __future__ import annotations

from pathlib import Path

from forklift import recipe as recipes
from forklift.distribution.modelfiles import needed_files
from forklift.distribution.sync import plan_sync, sync
from forklift.distribution.transfer import rsync_argv
from forklift.plan.layout import node_layer_ranges, pp_indices, pp_partition
from forklift.recipe.schema import Recipe
from forklift.runner import LocalRunner
from forklift.runner.ssh import SshRunner
from tests.unit.cluster.fakes import tiny_model


def test_pp_partition_matches_vllm_rule() -> None:
    assert pp_partition(79, 3) == [26, 27, 26]  # seed 002's GLM split
    assert pp_partition(30, 2) == [15, 15]
    assert pp_partition(10, 4) == [2, 3, 3, 2]
    assert pp_indices(79, 1, 3) == (26, 53)
    assert pp_partition(10, 2, [3, 7]) == [3, 7]


def test_node_layer_ranges_with_tp_inside_nodes() -> None:
    assert node_layer_ranges(30, nnodes=2, tp=1, pp=2) == [[(0, 15)], [(15, 30)]]
    assert node_layer_ranges(8, nnodes=2, tp=2, pp=2) == [[(0, 4)], [(4, 8)]]
    assert node_layer_ranges(8, nnodes=1, tp=1, pp=2) == [[(0, 4), (4, 8)]]


def _recipe(model: Path, dest: Path) -> Recipe:
    return recipes.load("default", [f"model.source={model}",
                                    f"nodes=[{{host: localhost}}, {{host: 127.0.0.1, model_path: {dest}}}]",
                                    "parallel.pp=2"])


def test_pp_nodes_get_only_their_shards(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "m", layers=8, shards=4)
    need = needed_files(model, _recipe(model, tmp_path / "d"))
    s = [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    assert s[1] in need[0] and s[2] not in need[0]
    assert s[2] in need[1] and s[1] not in need[1]
    for i in (0, 1):  # shards with embeddings / lm_head, config and index go everywhere
        assert {s[0], s[3], "config.json", "tokenizer.json", "model.safetensors.index.json"} <= set(need[i])


def test_sync_copies_only_needed_files_and_reports_bytes(tmp_path: Path) -> None:
    model = tiny_model(tmp_path / "m", layers=8, shards=4)
    dest = tmp_path / "node1"
    r = _recipe(model, dest)
    plan = plan_sync(r, model)
    assert plan[1].bytes == sum((model / f).stat().st_size for f in plan[1].files)
    out = sync(r, {0: LocalRunner(), 1: LocalRunner()}, here=model).nodes
    assert out[0].method == "source"
    assert sorted(p.name for p in dest.iterdir()) == sorted(plan[1].files)
    assert not (dest / "model-00002-of-00004.safetensors").exists()
    assert out[1].method == "rsync" and out[1].transferred == plan[1].bytes
    again = sync(r, {0: LocalRunner(), 1: LocalRunner()}, here=model).nodes
    assert again[1].method == "skip" and again[1].transferred is None  # matching files: nothing sent


def test_rsync_uses_the_same_ssh_options(tmp_path: Path) -> None:
    ssh = SshRunner("root@10.231.0.2:2222", ssh_config="/tmp/cfg").options()
    argv = rsync_argv("/j/files", str(tmp_path), "root@10.231.0.2:/models/m", ssh=ssh, bwlimit_mb=None)
    e = argv[argv.index("-e") + 1]
    assert e.startswith("ssh -F /tmp/cfg") and "ControlMaster=auto" in e and "-p 2222" in e
    assert argv[-2:] == [f"{tmp_path}/", "root@10.231.0.2:/models/m/"]
    assert {"--partial", "--append-verify", "--copy-links", "--files-from=/j/files"} <= set(argv)
