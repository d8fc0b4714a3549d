"""What vLLM's "Model loading took" counts beyond the loaded tensors' bytes for 4-bit auto_gptq / auto_awq dense
models on the Machete kernel: the caching allocator's slack (forklift.plan.allocator), replayed over the load's
tensor allocations in vLLM 0.26's order.

The program, per rank of a stage (model_loader/base_loader.py BaseModelLoader.load_model @0.26.0):

1. ``initialize_model``: every parameter in module-construction order: the embedding (first stage); per decoder
   layer qkv_proj's and o_proj's parameters in the method's ``create_weights`` order (auto_awq.py
   AutoAWQLinearMethod: qweight, qzeros, scales; auto_gptq.py AutoGPTQLinearMethod: qweight, g_idx, scales,
   qzeros), the rotary cache once per stage (rotary_embedding/base.py _compute_cos_sin_cache: inv_freq, positions,
   the fp32 angle table, cos, sin, their concatenation, then ``.to(dtype)``), Attention's four float32 scale
   buffers (attention.py set_default_quant_scales), q_norm / k_norm where the family has them, gate_up_proj's and
   down_proj's parameters, the two layer norms (llama.py LlamaDecoderLayer, qwen3.py Qwen3DecoderLayer); the final
   norm and lm_head (last stage).
2. ``load_weights`` (dummy_loader.py): ``uniform_`` in place, no allocation.
3. ``process_weights_after_loading`` (model_loader/utils.py, module order): auto_gptq on Machete
   (machete.py MacheteLinearKernel.process_weights_after_loading, transform_w_q) makes ``x.t().contiguous()``, then
   ``machete_prepack_B``'s output, frees the first and the loaded qweight; scales stay (``contiguous`` of a
   contiguous tensor), g_idx and qzeros stay. auto_awq (auto_awq.py _convert_awq_to_standard_format, then Machete's
   transform_w_q and transform_w_zp) in the op order the H200 allocator trace recorded (``_awq_to_machete``).

The whole load runs under ``max_split_size_mb:20`` (gpu_worker.py load_model @0.26.0), which keeps freed blocks of
20 MiB and more away from smaller requests (forklift.plan.allocator). Replayed against the H200 probes (vLLM 0.26.0,
dummy weights; blocks minus storages): llama8b GPTQ 8,453,632 B, llama8b AWQ 33,619,456 B, Qwen3-8B AWQ
60,908,992 B, each equal to the measured figure. Covered: dense layers (attention + dense MLP, fused q/k/v and
gate/up) quantized 4-bit by auto_gptq without act-order or by auto_awq, every layer's linears on Machete. Not
covered (no term): Marlin and the other kernels, act-order, MoE, MLA, hybrid and multimodal models.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from forklift.model.quant import QuantScheme
from forklift.model.spec import ModelSpec
from forklift.plan.allocator import Allocator, Op, replay, replay_live
from forklift.plan.quant_layout import capability_int, choose, quantized_linears

_VOCAB_PAD = 64
# gpu_worker.py load_model @0.26.0: the load runs under _scoped_allocator_max_split(max_split_size_mb=20)
LOAD_MAX_SPLIT = 20 << 20
_FUSED = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "o_proj": "o", "gate_proj": "gate_up",
          "up_proj": "gate_up", "gate_up_proj": "gate_up", "down_proj": "down"}


@dataclass(frozen=True)
class Linear:
    k: int  # input features on the rank
    n: int  # output features on the rank (fused)


class _Program:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._ids: Iterator[int] = itertools.count()
        self.kept: set[int] = set()  # tensors the loaded model holds whose blocks never change

    def alloc(self, nbytes: int, kept: bool = False) -> int:
        key = next(self._ids)
        self.ops.append(("alloc", key, nbytes))
        if kept:
            self.kept.add(key)
        return key

    def free(self, key: int) -> None:
        self.ops.append(("free", key, 0))


def _linear_params(p: _Program, method: str, lin: Linear, group: int, act: int) -> dict[str, int]:
    g = lin.k // group if group > 0 else 1
    if method == "auto_awq":  # qweight (K, N/8) int32, qzeros (G, N/8) int32, scales (G, N)
        return {"qweight": p.alloc(lin.k * lin.n // 2), "qzeros": p.alloc(g * lin.n // 2),
                "scales": p.alloc(g * lin.n * act, kept=True)}
    return {"qweight": p.alloc(lin.k * lin.n // 2), "g_idx": p.alloc(lin.k * 4, kept=True),
            "scales": p.alloc(g * lin.n * act, kept=True), "qzeros": p.alloc(g * lin.n // 2, kept=True)}


def _rope(p: _Program, rows: int, width: int, dtype_bytes: int) -> None:
    half = width // 2 * 4
    a = p.alloc(half)  # arange(0, rotary_dim, 2)
    b = p.alloc(half)  # / rotary_dim
    p.free(a)
    c = p.alloc(half)  # base ** ...
    p.free(b)
    inv = p.alloc(half)  # 1.0 / ...
    p.free(c)
    t = p.alloc(rows * 4)
    freqs, cos, sin = p.alloc(rows * half), p.alloc(rows * half), p.alloc(rows * half)
    cache = p.alloc(rows * width * 4)
    for key in (inv, t, freqs, cos, sin):
        p.free(key)
    p.alloc(rows * width * dtype_bytes, kept=True)
    p.free(cache)


def _awq_to_machete(p: _Program, ps: dict[str, int], lin: Linear, group: int, act: int) -> None:
    """One linear's process_weights_after_loading under auto_awq on Machete, op by op as the H200 trace recorded it
    (tests/data/calibration/h200-grid/load-probe/r10-trace-*.json.gz): auto_awq.py _convert_awq_to_standard_format, then
    machete.py transform_w_q (scales stay: ``contiguous`` of a contiguous tensor) and transform_w_zp."""
    kn, gn = lin.k * lin.n, (lin.k // group if group > 0 else 1) * lin.n
    order, shifts = p.alloc(8 * 8), p.alloc(8 * 4)  # _REVERSE_AWQ_PACK_ORDER (int64), the shifts (int32)
    shifted = p.alloc(kn * 4)  # qw.unsqueeze(-1) >> shifts
    masked = p.alloc(kn * 4)  # & mask
    p.free(shifted)
    unpacked = p.alloc(kn * 4)  # [:, :, reverse_order]: a view of it lives until the return
    p.free(masked)
    widened = p.alloc(kn * 4)  # << shifts
    new_qw = p.alloc(kn // 2)  # .sum(dim=1)
    p.free(widened)
    shifted = p.alloc(gn * 4)  # the zero points likewise
    masked = p.alloc(gn * 4)
    p.free(shifted)
    unpacked_zp = p.alloc(gn * 4)
    p.free(masked)
    widened = p.alloc(gn * 4)
    new_qz = p.alloc(gn // 2)
    p.free(widened)
    for key in (order, shifts, ps["qweight"], unpacked, ps["qzeros"], unpacked_zp):  # locals and replaced params
        p.free(key)
    transposed = p.alloc(kn // 2)  # transform_w_q: x.t().contiguous()
    p.alloc(kn // 2, kept=True)  # machete_prepack_B's output
    p.free(transposed)
    p.free(new_qw)
    zp = p.alloc(gn * 4)  # unpack_quantized_values_into_int32's output
    for _ in range(8):  # its loop over the pack factor: a shift and a mask per step
        a, b = p.alloc(gn // 2), p.alloc(gn // 2)
        p.free(a)
        p.free(b)
    neg, prod = p.alloc(gn * act), p.alloc(gn * act)  # -1.0 * w_s, * zp.to(dtype)
    p.alloc(gn * act, kept=True)  # .contiguous()
    p.free(neg)
    p.free(prod)
    p.free(new_qz)
    p.free(zp)


def program(spec: ModelSpec, method: str, layers: list[dict[str, Linear]], *, group: int, act: int, tp: int,
            first: bool, last: bool) -> tuple[list[Op], set[int]]:
    """The load's allocations and frees on one rank, and the tensors whose blocks the loaded model keeps as made."""
    p = _Program()
    h = spec.hidden_size
    vocab_rows = -(-spec.vocab_size // (_VOCAB_PAD * tp)) * _VOCAB_PAD
    if first:
        p.alloc(vocab_rows * h * act, kept=True)
    params = []
    rope = next(iter(spec.rope_caches), None)
    for i, lins in enumerate(layers):
        ps = {name: _linear_params(p, method, lins[name], group, act) for name in ("qkv", "o")}
        if i == 0 and rope is not None:
            _rope(p, rope.rows, rope.width, rope.dtype_bytes)
        for _ in range(4):
            p.alloc(4, kept=True)
        if spec.qk_norm:
            p.alloc(spec.head_dim * act, kept=True)
            p.alloc(spec.head_dim * act, kept=True)
        ps |= {name: _linear_params(p, method, lins[name], group, act) for name in ("gate_up", "down")}
        p.alloc(h * act, kept=True)
        p.alloc(h * act, kept=True)
        params.append(ps)
    if last:
        p.alloc(h * act, kept=True)
        p.alloc(vocab_rows * h * act, kept=True)
    if method == "auto_awq":
        for ps, lins in zip(params, layers, strict=True):
            for name in ("qkv", "o", "gate_up", "down"):
                _awq_to_machete(p, ps[name], lins[name], group, act)
    if method == "auto_gptq":
        for ps, lins in zip(params, layers, strict=True):
            for name in ("qkv", "o", "gate_up", "down"):
                nbytes = lins[name].k * lins[name].n // 2
                contiguous = p.alloc(nbytes)
                p.alloc(nbytes, kept=True)  # machete_prepack_B's output
                p.free(contiguous)
                p.free(ps[name]["qweight"])
    return p.ops, p.kept


def slack_of(ops: list[Op], kept: set[int]) -> int:
    """Blocks minus requested bytes over the kept tensors after the program."""
    a, live = replay_live(ops, Allocator(max_split_size=LOAD_MAX_SPLIT))
    return sum(a.blocks[addr].size - a.blocks[addr].requested for key, addr in live.items() if key in kept)


def _covered_layers(spec: ModelSpec, scheme: QuantScheme, tp: int, capability: str, start: int,
                    end: int) -> list[dict[str, Linear]] | None:
    if scheme.method not in ("auto_gptq", "auto_awq") or scheme.bits != 4 or scheme.act_order:
        return None
    if spec.moe is not None or spec.mla is not None or spec.vision is not None:
        return None
    if any(layer.mixer != "attention" or layer.mlp != "dense" for layer in spec.layers[start:end]):
        return None
    cap = capability_int(capability)
    if cap is None:
        return None
    found: dict[int, dict[str, tuple[int, int]]] = {}
    for tensor, shape in quantized_linears(spec, scheme, tp):
        if tensor.layer is None or not start <= tensor.layer < end:
            continue
        proj = tensor.module.rpartition(".")[2]
        if shape is None or proj not in _FUSED:
            return None
        kernel = choose(scheme, shape, cap)
        if kernel is None or kernel.name != "MacheteLinearKernel":
            return None
        fused = found.setdefault(tensor.layer, {})
        k, n = fused.get(_FUSED[proj], (shape.k, 0))
        fused[_FUSED[proj]] = (k, n + shape.n)
    layers = []
    for i in range(start, end):
        fused = found.get(i, {})
        if set(fused) != {"qkv", "o", "gate_up", "down"}:
            return None
        layers.append({name: Linear(k, n) for name, (k, n) in fused.items()})
    return layers


@lru_cache(maxsize=64)
def load_slack(spec: ModelSpec, scheme: QuantScheme, *, tp: int, capability: str, start: int, end: int,
               first: bool, last: bool, act_bytes: int) -> int | None:
    """The allocator's slack over a stage's load on one rank (bytes), or None where this replay does not cover the
    model, method or kernel (see the module's docstring)."""
    layers = _covered_layers(spec, scheme, tp, capability, start, end)
    if layers is None:
        return None
    ops, kept = program(spec, scheme.method, layers, group=scheme.group, act=act_bytes, tp=tp, first=first,
                        last=last)
    return slack_of(ops, kept)


__all__ = ["Linear", "load_slack", "program", "replay", "slack_of"]
