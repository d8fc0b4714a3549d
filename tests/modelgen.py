"""Tiny Hugging Face-style checkpoints for transfer tests: real safetensors shards whose tensors carry vLLM's
layer names, and a real ``model.safetensors.index.json`` mapping every tensor to its shard.

Layout (``layers`` decoder layers, ``stages`` pipeline stages of equal size): shard 1 holds the embeddings,
shards 2 .. stages+1 hold the layers of one stage each, the last shard holds the final norm and lm_head. A node
running stage k therefore needs exactly: shard 1, shard k+2, the last shard, and the non-weight files. The
expectation is written here from the layout, not computed by forklift's selection.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

NON_WEIGHT = ("config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
              "tokenizer_config.json")


def shard_name(i: int, total: int) -> str:
    return f"model-{i:05d}-of-{total:05d}.safetensors"


def make_model(folder: Path, *, layers: int = 6, stages: int = 3, layer_bytes: int = 1 << 20, seed: int = 0) -> Path:
    """Write the checkpoint; each layer holds ``layer_bytes`` of float32 weights (random: incompressible)."""
    assert layers % stages == 0
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    total = stages + 2
    per_stage = layers // stages
    hidden = 64
    rows = max(1, layer_bytes // (4 * hidden))
    shards: dict[str, dict[str, np.ndarray]] = {
        shard_name(1, total): {"model.embed_tokens.weight": rng.standard_normal((256, hidden), dtype=np.float32)},
        shard_name(total, total): {"model.norm.weight": rng.standard_normal((hidden,), dtype=np.float32),
                                   "lm_head.weight": rng.standard_normal((256, hidden), dtype=np.float32)},
    }
    for stage in range(stages):
        tensors = {}
        for layer in range(stage * per_stage, (stage + 1) * per_stage):
            tensors[f"model.layers.{layer}.mlp.down_proj.weight"] = rng.standard_normal((rows, hidden),
                                                                                          dtype=np.float32)
            tensors[f"model.layers.{layer}.input_layernorm.weight"] = np.ones((hidden,), dtype=np.float32)
        shards[shard_name(stage + 2, total)] = tensors
    weight_map: dict[str, str] = {}
    size = 0
    for name, tensors in shards.items():
        save_file(tensors, str(folder / name))
        weight_map.update(dict.fromkeys(tensors, name))
        size += sum(t.nbytes for t in tensors.values())
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": size}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": layers,
        "vocab_size": 256, "max_position_embeddings": 512, "torch_dtype": "float32"}, indent=2))
    (folder / "generation_config.json").write_text('{"do_sample": false}\n')
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": {}}}\n')
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 512}\n')
    return folder


def expected_files(stage: int, stages: int = 3) -> list[str]:
    """What a node running ``stage`` (of ``stages``, one stage per node) must hold, by the layout above."""
    total = stages + 2
    return sorted([*NON_WEIGHT, shard_name(1, total), shard_name(stage + 2, total), shard_name(total, total)])
