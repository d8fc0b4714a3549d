"""The 2026 flagships owners run on Sparks (issue 34 item 3): DeepSeek-V4 / V4.1, GLM-5.3-Flash and MiMo-V2.6.

Each was read at the first vLLM release whose registry serves it (sdists 0.19.1-0.34.0); none can be planned with the
cache kinds the planner has, so each plan stops and names the release, the source file and the missing cache spec.
MiMo-V2 plans (family mimo_v2, test_layer_kinds.py) and DeepSeek-V4 (family deepseek_v4, test_dsv4.py), both with
their published fp8 + MXFP4-experts quantization (test_dsv4_quant.py); a DeepSeek-V4 config without the
compressed-attention keys names them.
The strings asserted here are the names in vLLM's source (class, function, config key), not the planner's words:
the test fails if a refusal loses the piece an owner would need to look up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forklift.errors import ModelError, UnknownArchitectureError
from forklift.plan import make
from tests.unit.plan.conftest import recipe_for

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"

# config file -> (architecture, first release serving it, source names the refusal must carry)
CASES = {
    "deepseek-v4.1-flash.json": ("DeepseekV41ForCausalLM", "0.30.0",
                                 ("models/deepseek_v41/attention.py", "kv_source_layer_ids", "tokens_per_state",
                                  "CircularBufferSpec", "engram")),
    "glm-5.3-flash.json": ("Glm5NextForCausalLM", "0.30.0",
                           ("Glm5NextIndexerCache", "index_kpool", "KpoolTailSpec", "KDA",
                            "_get_kv_cache_groups_glm5_next", "mhc")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_flagship_on_two_sparks_is_refused_naming_release_and_missing_spec(tmp_path: Path, name: str) -> None:
    arch, release, names = CASES[name]
    with pytest.raises(UnknownArchitectureError) as err:
        make(recipe_for(tmp_path, CONFIGS / name, hardware="gb10", nodes=2, tp=2, max_model_len=131072))
    message = err.value.message
    assert arch in message and f"vLLM {release}" in message
    missing = [n for n in names if n.lower() not in message.lower()]
    assert not missing, f"{arch}'s refusal lost {missing}: {message}"
    assert "Missing:" in message or "does not model" in message or "no shape" in message
    assert err.value.fix  # the way on without the planner (render / up, or vLLM's own KV lines)


@pytest.mark.parametrize("arch", ["Glm5NextForConditionalGeneration", "MiMoV2OmniForCausalLM",
                                  "Qwen4ExpForCausalLM"])
def test_sibling_classes_are_refused_too_and_name_their_extra_tower_or_file(tmp_path: Path, arch: str) -> None:
    """The multimodal wrappers and the older MiMo class serve the same caches; planning them as anything else (or
    reporting them as unknown) would hide that the blocker is the same cache layout."""
    cfg = {"architectures": [arch], "hidden_size": 64, "num_hidden_layers": 2}
    with pytest.raises(UnknownArchitectureError) as err:
        make(recipe_for(tmp_path, cfg, hardware="gb10", nodes=2, tp=2, max_model_len=4096))
    message = err.value.message
    assert arch in message and "is served by vLLM" in message
    extra = {"Glm5NextForConditionalGeneration": "vision",
             "MiMoV2OmniForCausalLM": "audio", "Qwen4ExpForCausalLM": "CircularBufferSpec"}[arch]
    assert extra in message


def test_deepseek_v4_without_its_compressed_attention_keys_names_them(tmp_path: Path) -> None:
    cfg = {"architectures": ["DeepseekV4ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 43,
           "num_attention_heads": 64, "head_dim": 512, "vocab_size": 129280}
    with pytest.raises(ModelError) as err:
        make(recipe_for(tmp_path, cfg, hardware="gb10", nodes=2, tp=2, max_model_len=131072))
    for key in ("qk_rope_head_dim", "q_lora_rank", "o_lora_rank", "compress_ratios", "index_n_heads"):
        assert key in err.value.message
