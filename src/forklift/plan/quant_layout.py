"""What a quantized linear layer keeps on one rank after vLLM's ``process_weights_after_loading``: the kernel vLLM
picks for the layer on this GPU (its compute capability and the layer's shape on this rank) and that kernel's stored
tensors (values, scales, zero points, act-order indices, tile padding).

The kernels, their order and what each stores are rows of forklift/model/quant_layouts.yaml (``kernels``), each
with the vLLM file and function it was read from; this module only evaluates them. A kernel that keeps the
checkpoint's layout (``same_as_loaded``) leaves the checkpoint bytes per parameter (``QuantScheme.linear_bytes``) in
place. Routed experts keep the checkpoint layout here (the MXFP4 backends' padding is forklift.plan.weights').
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from forklift.model.quant import QuantScheme, layouts
from forklift.model.spec import ModelSpec, Tensor
from forklift.model.tensors import model_tensors
from forklift.plan.rounding import round_up

_QKV = ("q_proj", "k_proj", "v_proj")


@dataclass(frozen=True)
class Shape:
    """One linear layer on one rank: K (input features) and N (output features) on the rank, the full K, and the
    output width of the fused layer it belongs to (q / k / v are one QKVParallelLinear in vLLM)."""

    k: int
    n: int
    k_full: int
    n_fused: int

    @property
    def row_parallel(self) -> bool:
        return self.k != self.k_full


@dataclass(frozen=True)
class Kernel:
    name: str
    source: str
    capability: Mapping[str, int]
    when: Mapping[str, Any]
    stores: tuple[Mapping[str, Any], ...]
    pad: Mapping[str, Any] | None
    same_as_loaded: bool
    group_from_block: bool
    group_from_format: int | None


@cache
def kernels(family: str) -> tuple[Kernel, ...]:
    """The kernels vLLM tries for a layout family, in its order (quant_layouts.yaml ``kernels``)."""
    rows = layouts()["kernels"].get(family) or []
    return tuple(Kernel(name=str(r["name"]), source=str(r.get("source", "")), capability=r.get("capability") or {},
                        when=r.get("when") or {}, stores=tuple(r.get("stores") or ()), pad=r.get("pad"),
                        same_as_loaded=bool(r.get("same_as_loaded", False)),
                        group_from_block=bool(r.get("group_from_block", False)),
                        group_from_format=r.get("group_from_format")) for r in rows)


def capability_int(capability: str) -> int | None:
    """"9.0" -> 90 (vLLM's DeviceCapability.to_int); None when the profile names none (CPU)."""
    if not capability:
        return None
    major, _, minor = capability.partition(".")
    return int(major) * 10 + int(minor or 0)


def _capable(kernel: Kernel, cap: int) -> bool:
    c = kernel.capability
    if "exact" in c and cap != int(c["exact"]):
        return False
    if "min" in c and cap < int(c["min"]):
        return False
    return not ("below" in c and cap >= int(c["below"]))


def group_of(scheme: QuantScheme, kernel: Kernel) -> int:
    """The group size along K the kernel's scales use (-1: one per output channel)."""
    if kernel.group_from_block and scheme.weight_block:
        return scheme.weight_block[1]
    if kernel.group_from_format:
        return int(kernel.group_from_format)
    return scheme.group or -1


def _takes(kernel: Kernel, scheme: QuantScheme, shape: Shape) -> bool:
    """The kernel's can_implement for this layer (quant_layouts.yaml ``when``)."""
    w = kernel.when
    group = scheme.group or -1
    if "methods" in w and scheme.method not in w["methods"]:
        return False
    if "bits" in w and scheme.bits not in w["bits"]:
        return False
    if scheme.zero_point and "zero_point_bits" in w and scheme.bits not in w["zero_point_bits"]:
        return False
    if "group" in w and group not in w["group"]:
        return False
    if w.get("zero_point") is False and scheme.zero_point:
        return False
    if w.get("act_order") is False and scheme.act_order:
        return False
    if w.get("act_order_partitioned") is False and scheme.act_order and shape.row_parallel:
        return False
    if shape.k % int(w.get("k_multiple", 1)) or shape.n_fused % int(w.get("n_multiple", 1)):
        return False
    if w.get("group_divides_partition") and 0 < group < shape.k_full and shape.k % group:
        return False
    strict = w.get("act_order_strict")
    return not (strict and scheme.act_order and (shape.n_fused % int(strict["n"]) or shape.k % int(strict["k"])))


def choose(scheme: QuantScheme, shape: Shape, capability: int) -> Kernel | None:
    """The first kernel of the scheme's layout family that runs on this GPU and takes this layer."""
    for k in kernels(scheme.layout):
        if _capable(k, capability) and _takes(k, scheme, shape):
            return k
    return None


def padded(kernel: Kernel, scheme: QuantScheme, shape: Shape) -> tuple[int, int]:
    """(N, K) of the fused layer after the kernel's tile padding (utils/marlin_utils.py marlin_padded_nk: the cheaper
    of two [n, k] tile families, K kept a multiple of the group)."""
    pad = kernel.pad
    n, k = shape.n_fused, shape.k
    if not pad or (pad.get("unless") == "act_order" and scheme.act_order):
        return n, k
    group = group_of(scheme, kernel)
    g = group if group > 0 and pad.get("k_multiple_of_group") else 1
    options = [(round_up(n, int(pn)), round_up(k, math.lcm(int(pk), g))) for pn, pk in pad["candidates"]]
    return min(options, key=lambda nk: (nk[0] * nk[1], nk[0] + nk[1]))


def _holds(cond: str, scheme: QuantScheme) -> bool:
    return {
        "always": True, "zero_point": scheme.zero_point, "act_order": scheme.act_order,
        "loaded_zeros": scheme.loaded_zeros and not scheme.zero_point,
        "loaded_g_idx": scheme.loaded_g_idx or scheme.act_order,
    }[cond]


def stored_bytes(kernel: Kernel, scheme: QuantScheme, shape: Shape, act_bytes: float) -> float:
    """Bytes the fused layer keeps on this rank with this kernel (quant_layouts.yaml ``stores``)."""
    n, k = padded(kernel, scheme, shape)
    group = group_of(scheme, kernel)
    k_rows = shape.k_full if scheme.act_order and scheme.act_order_scales_full and shape.row_parallel else k
    groups = 1 if group <= 0 else -(-k_rows // group)
    total = 0.0
    for part in kernel.stores:
        if not _holds(str(part.get("when", "always")), scheme):
            continue
        size = part["bytes"]
        each = scheme.bits / 8 if size == "bits" else act_bytes if size == "act" else float(size)
        count = {"element": n * k, "group": groups * n, "in": k, "out": n}[str(part.get("per", "element"))]
        total += each * count
    return total


class LayerShapes:
    """Shapes of the model's linear tensors on one rank: K from the split (row-parallel: the tensor over the hidden
    size; otherwise the hidden size, or the low-rank input quant_layouts.yaml does not need to know: MLA's
    q_b_proj / kv_b_proj, KDA's f_b / g_b), N from the tensor; q / k / v fused as vLLM fuses them."""

    def __init__(self, spec: ModelSpec, tensors: Sequence[Tensor], tp: int) -> None:
        self.spec, self.tp = spec, tp
        self._fused: dict[tuple[int | None, str], int] = {}
        fused_heads = {(t.layer, t.module.rpartition(".")[0]) for t in tensors
                       if t.split == "kv" and t.module.endswith(".k_proj")}
        for t in tensors:
            head, _, proj = t.module.rpartition(".")
            key = (t.layer, head)
            if proj in _QKV and key in fused_heads and (own := self._own(t)) is not None:
                self._fused[key] = self._fused.get(key, 0) + own[1]

    def _in_features(self, tensor: Tensor) -> int:
        s, proj = self.spec, tensor.module.rpartition(".")[2]
        if proj == "q_b_proj" and s.mla is not None and s.mla.q_lora_rank:
            return s.mla.q_lora_rank
        if proj == "kv_b_proj" and s.mla is not None:
            return s.mla.kv_lora_rank
        if proj in ("f_b_proj", "g_b_proj") and s.state is not None:
            return s.state.head_dim
        return s.hidden_size

    def _own(self, tensor: Tensor) -> tuple[int, int, int] | None:
        """(K on the rank, N on the rank, full K), or None when the tensor is not a plain 2-D split linear."""
        h = self.spec.hidden_size
        if tensor.split == "row":
            if tensor.numel % h or (tensor.numel // h) % self.tp:
                return None
            k_full = tensor.numel // h
            return k_full // self.tp, h, k_full
        k = self._in_features(tensor)
        if tensor.numel % k:
            return None
        n_full = tensor.numel // k
        kv = tensor.kv_ways(self.tp, self.spec.num_kv_heads)
        ways = {"col": self.tp, "kv": kv, "replicated": 1}.get(tensor.split)
        if ways is None or n_full % ways:
            return None
        return k, n_full // ways, k

    def shape(self, tensor: Tensor) -> Shape | None:
        own = self._own(tensor)
        if own is None:
            return None
        k, n, k_full = own
        head, _, proj = tensor.module.rpartition(".")
        fused = self._fused.get((tensor.layer, head), n) if proj in _QKV else n
        return Shape(k=k, n=n, k_full=k_full, n_fused=fused)


@lru_cache(maxsize=16)
def quantized_linears(spec: ModelSpec, scheme: QuantScheme, tp: int) -> tuple[tuple[Tensor, Shape | None], ...]:
    """The dense linear tensors vLLM quantizes (routed experts and MTP layers aside), with their shape on one rank:
    what the start rules and the kernel notes walk (cached: every plan of a recipe's advice asks again)."""
    tensors = model_tensors(spec)
    shapes = LayerShapes(spec, tensors, tp)
    return tuple((t, shapes.shape(t)) for t in tensors
                 if t.role != "experts" and scheme.quantized(t.module, linear=t.linear, role=t.role))


class StoredLayout:
    """Per-tensor stored bytes of one scheme on one GPU (None where the checkpoint layout stands)."""

    def __init__(self, spec: ModelSpec, scheme: QuantScheme, tensors: Sequence[Tensor], *, tp: int,
                 capability: str, act_bytes: float) -> None:
        self.scheme, self.act_bytes = scheme, act_bytes
        self.cap = capability_int(capability)
        self.shapes = LayerShapes(spec, tensors, tp)
        self.used: dict[str, float] = {}
        """Kernel name -> how many of vLLM's (fused) linear layers it holds (notes, bench)."""
        runnable = [k for k in kernels(scheme.layout) if self.cap is not None and _capable(k, self.cap)]
        self.trivial = all(k.same_as_loaded for k in runnable)
        """Every kernel that can run here keeps the checkpoint layout: nothing to evaluate per layer."""
        self._memo: dict[Shape, Kernel | None] = {}
        self._bytes: dict[Shape, float] = {}

    def kernel_for(self, tensor: Tensor) -> tuple[Kernel, Shape] | None:
        if self.cap is None or tensor.role == "experts" or not kernels(self.scheme.layout):
            return None
        shape = self.shapes.shape(tensor)
        if shape is None:
            return None
        if shape not in self._memo:
            self._memo[shape] = choose(self.scheme, shape, self.cap)
        kernel = self._memo[shape]
        return None if kernel is None else (kernel, shape)

    def tensor_bytes(self, tensor: Tensor) -> float | None:
        """Stored bytes of a quantized tensor on this rank, or None to keep numel x the checkpoint bytes."""
        if self.trivial:
            return None
        found = self.kernel_for(tensor)
        if found is None:
            return None
        kernel, shape = found
        self.used[kernel.name] = self.used.get(kernel.name, 0.0) + shape.n / shape.n_fused
        if kernel.same_as_loaded:
            return None
        if shape not in self._bytes:
            self._bytes[shape] = stored_bytes(kernel, self.scheme, shape, self.act_bytes) * shape.n / shape.n_fused
        return self._bytes[shape]
