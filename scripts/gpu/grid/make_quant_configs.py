"""Writes the quantized dummy-weight configs of the H200 grid (models/llama8b-q-*.config.json). Run once; committed.

Every config is scripts/gpu/models/llama8b-like.config.json (Llama-3-8B per-layer shapes, 32 layers, vocab 49152
for SmolLM2's tokenizer) plus one ``quantization_config`` as the quantizer writes it, for ``--load-format dummy``
on vLLM 0.26.0:
  llama8b-q-awq           AutoAWQ GEMM, 4 bit, group 128, zero points (vLLM: auto_awq)
  llama8b-q-gptq          GPTQ 4 bit, group 128, sym, desc_act false, modules_in_block_to_quantize listed
  llama8b-q-gptq-act      the same with desc_act true (act-order: g_idx per input row)
  llama8b-q-gptq-nolist   GPTQ 4 bit without modules_in_block_to_quantize: vLLM 0.26's
                          AutoGPTQConfig.maybe_update_config then reads the quantized layers from the
                          checkpoint's safetensors metadata, which a dummy checkpoint does not have
  llama8b-q-ct-w4a16      compressed-tensors pack-quantized W4A16, group 128, symmetric, lm_head ignored
  llama8b-q-ct-fp8        compressed-tensors FP8 W8A8, per-channel weights, dynamic per-token activations
  llama8b-q-fp8-tensor    quant_method fp8, per-tensor weight scales, dynamic activations
  llama8b-q-fp8-block     quant_method fp8, weight_block_size [128, 128] (DeepSeek-style block FP8)
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = HERE.parent / "models" / "llama8b-like.config.json"
BLOCKS = [["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"], ["self_attn.o_proj"],
          ["mlp.up_proj", "mlp.gate_proj"], ["mlp.down_proj"]]
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True, "lm_head": False,
        "damp_percent": 0.01, "true_sequential": True, "checkpoint_format": "gptq"}


def ct(fmt: str, weights: dict, acts: dict | None) -> dict:
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "global_compression_ratio": None, "ignore": ["lm_head"], "kv_cache_scheme": None,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": acts,
                                          "output_activations": None, "format": fmt}}}


QUANT = {
    "llama8b-q-awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
                      "modules_to_not_convert": None},
    "llama8b-q-gptq": {**GPTQ, "modules_in_block_to_quantize": BLOCKS},
    "llama8b-q-gptq-act": {**GPTQ, "desc_act": True, "modules_in_block_to_quantize": BLOCKS},
    "llama8b-q-gptq-nolist": dict(GPTQ),
    "llama8b-q-ct-w4a16": ct("pack-quantized",
                             {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                              "group_size": 128, "dynamic": False, "actorder": None, "observer": "minmax"}, None),
    "llama8b-q-ct-fp8": ct("float-quantized",
                           {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                            "group_size": None, "dynamic": False, "observer": "minmax"},
                           {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
                            "group_size": None, "dynamic": True, "observer": None}),
    "llama8b-q-fp8-tensor": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"},
    "llama8b-q-fp8-block": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                            "weight_block_size": [128, 128]},
}

if __name__ == "__main__":
    base = json.loads(BASE.read_text())
    for name, qc in QUANT.items():
        path = HERE / "models" / f"{name}.config.json"
        path.write_text(json.dumps({**base, "quantization_config": qc}, indent=1) + "\n")
        print(path)
