"""Plan states the bytes of model files each node needs (the shards holding its layers plus shared files)."""

from __future__ import annotations

import json
from pathlib import Path

from forklift import recipe as recipes
from forklift.distribution.sync import plan_sync
from forklift.plan import make
from tests.helpers import forklift
from tests.unit.plan.conftest import recipe_for

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
          "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
          "num_hidden_layers": 8, "vocab_size": 1024, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
SHARED_FILES = ["config.json", "tokenizer.json", "model.safetensors.index.json"]
# shard -> tensors it holds; 8 layers split by pp=2 into 0-3 and 4-7; shard 3 straddles the boundary
LAYOUT = {
    "model-00001-of-00005.safetensors": ["model.embed_tokens.weight"],
    "model-00002-of-00005.safetensors": [f"model.layers.{i}.mlp.down_proj.weight" for i in (0, 1, 2)],
    "model-00003-of-00005.safetensors": [f"model.layers.{i}.self_attn.q_proj.weight" for i in (3, 4)],
    "model-00004-of-00005.safetensors": [f"model.layers.{i}.mlp.up_proj.weight" for i in (5, 6, 7)],
    "model-00005-of-00005.safetensors": ["model.norm.weight", "lm_head.weight"],
}


def _fake_model(model: Path) -> None:
    """A few small shards of distinct sizes, an index mapping their tensors, and a tokenizer."""
    (model / "tokenizer.json").write_text("{}")
    weight_map: dict[str, str] = {}
    for k, (shard, tensors) in enumerate(LAYOUT.items()):
        (model / shard).write_bytes(b"\0" * (1000 * 3**k + k))
        weight_map.update(dict.fromkeys(tensors, shard))
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _size(model: Path, names: list[str]) -> int:
    return sum((model / n).stat().st_size for n in names)


def _shards(*numbers: int) -> list[str]:
    return [f"model-{n:05d}-of-00005.safetensors" for n in numbers]


def test_pp2_nodes_need_only_the_shards_of_their_layers(tmp_path: Path) -> None:
    recipe = recipe_for(tmp_path, CONFIG, nodes=2, pp=2)
    model = Path(recipe.model.source)
    _fake_model(model)
    mf = make(recipe).model_files
    assert mf is not None and mf.dir == str(model)
    node0 = SHARED_FILES + _shards(1, 2, 3, 5)  # layers 0-3: shards 2 and 3, plus embeddings and lm_head
    node1 = SHARED_FILES + _shards(1, 3, 4, 5)  # layers 4-7: shards 3 and 4, plus embeddings and lm_head
    assert [(n.host, n.layers) for n in mf.nodes] == [("node0", "0-3"), ("node1", "4-7")]
    assert [n.bytes for n in mf.nodes] == [_size(model, node0), _size(model, node1)]
    assert [(n.shards, n.files) for n in mf.nodes] == [(4, 7), (4, 7)]
    assert mf.total_bytes == _size(model, SHARED_FILES + _shards(1, 2, 3, 4, 5)) and mf.shards_total == 5
    # model sync --dry-run states the same bytes: one selection, two callers
    assert [s.bytes for s in plan_sync(recipe, model)] == [n.bytes for n in mf.nodes]


def test_one_node_needs_every_file(tmp_path: Path) -> None:
    for pp in (1, 2):
        recipe = recipe_for(tmp_path, CONFIG, nodes=1, pp=pp)
        model = Path(recipe.model.source)
        _fake_model(model)
        mf = make(recipe).model_files
        assert mf is not None and len(mf.nodes) == 1
        assert mf.nodes[0].bytes == _size(model, SHARED_FILES + _shards(1, 2, 3, 4, 5)) == mf.total_bytes
        assert mf.nodes[0].layers == ("0-7" if pp == 1 else "0-3,4-7")


def test_tp_across_nodes_without_pp_needs_every_file_everywhere(tmp_path: Path) -> None:
    recipe = recipe_for(tmp_path, CONFIG, nodes=2, tp=2)
    model = Path(recipe.model.source)
    _fake_model(model)
    mf = make(recipe).model_files
    assert mf is not None
    everything = _size(model, SHARED_FILES + _shards(1, 2, 3, 4, 5))
    assert [n.bytes for n in mf.nodes] == [everything, everything]
    assert [s.bytes for s in plan_sync(recipe, model)] == [everything, everything]


def test_without_local_files_plan_says_so_instead_of_guessing(tmp_path: Path) -> None:
    recipe = recipe_for(tmp_path, CONFIG, nodes=2, pp=2)  # config.json only, no weights
    plan = make(recipe)
    assert plan.model_files is None
    assert any("holds no weight files" in n for n in plan.notes)
    bundled_config = make(recipes.load("glm-5.2-reap-3x-spark-pp3"))
    assert bundled_config.model_files is None
    assert any(n.startswith("model files: no local model directory") for n in bundled_config.notes)


def test_cli_plan_states_bytes_per_node(tmp_path: Path) -> None:
    res = forklift("plan", "glm-5.2-reap-3x-spark-pp3", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["model_files"] is None and len(data["ranks"]) == 3

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    _fake_model(model)
    args = ["plan", "default", "--set", f"model.source={model}", "--set", "model.load_format=dummy",
            "--set", "nodes=[{host: alpha, hardware: cpu}, {host: beta, hardware: cpu}]", "--set", "parallel.pp=2"]
    res = forklift(*args, "--json")
    assert res.returncode == 0, res.stderr
    nodes = json.loads(res.stdout)["model_files"]["nodes"]
    assert [(n["host"], n["bytes"]) for n in nodes] == [
        ("alpha", _size(model, SHARED_FILES + _shards(1, 2, 3, 5))),
        ("beta", _size(model, SHARED_FILES + _shards(1, 3, 4, 5)))]
    human = forklift(*args, env={"COLUMNS": "200"})
    assert human.returncode == 0, human.stderr
    assert "model files per node" in human.stdout
    assert "beta" in human.stdout and f"{nodes[1]['bytes']:,}" in human.stdout
