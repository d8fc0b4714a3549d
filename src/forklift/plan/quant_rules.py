"""Will a quantized checkpoint start? The checks vLLM makes while it builds the layers (before any weight loads) or
at the first forward, as PlanErrors that name the key and the fix, and the kernel choices a user should know about
(weight-only FP8 / NVFP4, AWQ's slow fallback) as notes.

Each rule is a row of forklift/model/quant_layouts.yaml ``start_rules`` with the vLLM file and function it was read
from; a method lists the rules that apply to it (``methods.<name>.start_rules``) and the release data it depends on
(``supported``, ``absent_from``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from forklift.errors import PlanError
from forklift.model.quant import QuantScheme, layouts, loaded_scheme, online_scheme
from forklift.model.spec import ModelSpec, Tensor
from forklift.plan import quant_layout
from forklift.plan.rules import version_key

GIB = 2**30


@dataclass(frozen=True)
class Setup:
    """What the rules need of a plan: the TP layout, how routed experts are split, the GPU and the release."""

    tp: int
    dp: int = 1
    ep: bool = False
    capability: str = ""
    version: str = "0.26.0"
    dtype_bytes: int = 2

    def expert_tp(self, tp: int | None = None) -> int:
        """Ways the routed experts' intermediate dimension is split: tp x dp, or 1 under expert parallelism (each
        rank holds whole experts: fused_moe/config.py FusedMoEParallelConfig.make)."""
        return 1 if self.ep else (self.tp if tp is None else tp) * self.dp


def source(rule: str) -> str:
    """Where vLLM makes this check (quant_layouts.yaml start_rules)."""
    return str(layouts()["start_rules"][rule])


def where(rule: str) -> str:
    """The file and function of a rule's source, for a note."""
    return "vLLM " + source(rule).split(":", 1)[0]


def _method_row(scheme: QuantScheme) -> Mapping[str, Any]:
    rows: Mapping[str, Any] = layouts()["methods"]
    name = scheme.method if scheme.method in rows else next(
        (n for n, r in rows.items() if scheme.method in r.get("checkpoint", ())), "")
    row: Mapping[str, Any] = rows.get(name, {})
    return row


def supported(scheme: QuantScheme, version: str) -> Mapping[str, Any]:
    """The method's ``supported`` values for this release (a flat row, or the newest release key at or below it)."""
    sup = _method_row(scheme).get("supported") or {}
    if sup and all(isinstance(v, Mapping) for v in sup.values()):
        keys = [k for k in sup if version_key(k) <= version_key(version)] or [min(sup, key=version_key)]
        return dict(sup[max(keys, key=version_key)])
    return dict(sup)


# --------------------------------------------------------------------------------------- method and release


def _method_removed(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    gone = _method_row(scheme).get("absent_from")
    if gone and version_key(setup.version) >= version_key(str(gone)):
        raise PlanError(
            f"vLLM {setup.version} has no '{scheme.method}' quantization method (it is gone from vLLM {gone} on: "
            f"{source('method_removed')})",
            fix=f"Plan and serve with vLLM older than {gone} (--vllm-version), or a checkpoint in another format "
            "(AWQ, GPTQ, FP8, compressed-tensors).")


def _not_in(values: Any, got: Any) -> bool:
    return values is not None and got not in values


def _awq_bits(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    sup = supported(scheme, setup.version)
    if _not_in(sup.get("bits"), scheme.bits):
        raise PlanError(
            f"quantization_config.bits={scheme.bits}: vLLM {setup.version}'s AWQ takes {sup['bits']} only "
            f"({source('awq_bits')})",
            fix="Use a 4-bit AWQ checkpoint, or the same model as GPTQ / compressed-tensors at 8 bits.")


def _gptq_type(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    sup = supported(scheme, setup.version)
    sym = scheme.param("sym", "true") == "true"
    if _not_in(sup.get("bits"), scheme.bits) or _not_in(sup.get("sym"), sym):
        raise PlanError(
            f"quantization_config bits={scheme.bits}, sym={str(sym).lower()}: vLLM {setup.version}'s GPTQ takes "
            f"symmetric {' or '.join(map(str, sup.get('bits', [])))}-bit only ({source('gptq_type')})",
            fix="Use a symmetric (sym: true) 4- or 8-bit GPTQ checkpoint, or an AWQ / compressed-tensors export "
            "(both take zero points).")


def _marlin_group(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    groups = supported(scheme, setup.version).get("group")
    if _not_in(groups, scheme.group):
        raise PlanError(
            f"quantization_config.group_size={scheme.group}: vLLM {setup.version}'s GPTQ (Marlin) takes "
            f"{groups} ({source('marlin_group')})",
            fix="Use a GPTQ checkpoint quantized with group_size 32, 64 or 128 (or -1, per channel).")


def _inc_data_type(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    sup = supported(scheme, setup.version)
    dtype = scheme.param("data_type", "int")
    if _not_in(sup.get("data_type"), dtype) or _not_in(sup.get("bits"), scheme.bits if scheme.layout == "wna16"
                                                        else int(scheme.param("bits", "4"))):
        raise PlanError(
            f"quantization_config data_type={dtype}, bits={scheme.param('bits')}: vLLM {setup.version}'s AutoRound "
            f"(INC) takes data_type {sup.get('data_type')} with bits {sup.get('bits')} ({source('inc_data_type')})",
            fix="Use a vLLM release that reads this AutoRound format (mx_fp and fp data types: 0.33), or an "
            "integer AutoRound export (auto_round:auto_gptq).")


# ----------------------------------------------------------------------------------------- shapes per TP rank


@dataclass(frozen=True)
class _Linear:
    """One quantized linear layer of vLLM (fused as vLLM fuses it) on one rank."""

    name: str
    row: bool  # RowParallelLinear: K split
    k: int
    k_full: int
    parts: tuple[int, ...]  # output partition sizes on the rank (QKV: q, k, v; gate_up: gate, up)
    output_size: int  # the full output (all partitions, all ranks)


def _linears(spec: ModelSpec, scheme: QuantScheme, tp: int) -> Iterator[_Linear]:
    """Each distinct quantized dense linear layer, as vLLM builds it (q / k / v as one QKVParallelLinear)."""
    groups: dict[tuple[int | None, str], list[tuple[Tensor, quant_layout.Shape]]] = {}
    for t, shape in quant_layout.quantized_linears(spec, scheme, tp):
        if t.role == "lm_head" or shape is None:
            continue
        head, _, proj = t.module.rpartition(".")
        fused = proj in ("q_proj", "k_proj", "v_proj") and shape.n_fused != shape.n
        groups.setdefault((t.layer, head if fused else t.module), []).append((t, shape))
    seen: set[tuple[str, tuple[int, ...], int]] = set()
    for (_, name), members in groups.items():
        first, shape = members[0]
        gated = spec.moe.gated if spec.moe is not None else spec.family != "nemotron_h"  # as model.tensors
        if name.endswith("gate_up_proj") and gated:
            parts: tuple[int, ...] = (shape.n // 2, shape.n // 2)
        else:
            parts = tuple(s.n for _, s in members)
        row = first.split == "row"
        full = spec.hidden_size if row else sum(t.numel for t, _ in members) // shape.k_full
        short = re.sub(r"^model\.layers\.\d+\.", "", name)
        if (short, parts, shape.k) not in seen:
            seen.add((short, parts, shape.k))
            yield _Linear(name=short, row=row, k=shape.k, k_full=shape.k_full, parts=parts, output_size=full)


def block_failure(spec: ModelSpec, scheme: QuantScheme, tp: int, expert_tp: int) -> str | None:
    """The first block-FP8 shape vLLM refuses at this TP (None: every shape divides)."""
    if scheme.weight_block is None:
        return None
    block_n, block_k = scheme.weight_block
    every = scheme.param("block_check") == "every_partition"
    for lin in _linears(spec, scheme, tp):
        if every and (lin.k % block_k or sum(lin.parts) % block_n):  # output_size_per_partition: the fused width
            return (f"{lin.name}: output {sum(lin.parts)} / input {lin.k} per TP rank are not multiples of "
                    f"{block_n} / {block_k}")
        if tp > 1 and lin.row and lin.k_full // lin.k == tp and lin.k % block_k:
            return f"{lin.name}: input per TP rank {lin.k} is not a multiple of block_k {block_k}"
        tp_split = tp > 1 and lin.output_size // sum(lin.parts) == tp
        checked = lin.parts if tp_split else lin.parts[:-1] if len(lin.parts) > 1 else ()
        for size in checked:
            if size % block_n:
                return f"{lin.name}: output partition {size} per TP rank is not a multiple of block_n {block_n}"
        if lin.k % block_k:  # per_token_group_quant_fp8 on the layer's input at the first forward
            return f"{lin.name}: input {lin.k} per TP rank is not a multiple of the activation group {block_k}"
    moe = spec.moe
    if moe is not None and scheme.quantized("model.layers.0.mlp.experts", linear=True, role="experts") \
            and any(layer.moe for layer in spec.layers):
        inter = moe.intermediate // expert_tp if moe.intermediate % expert_tp == 0 else moe.intermediate / expert_tp
        if inter != int(inter) or int(inter) % block_n:
            return f"routed experts: intermediate per rank {inter:g} is not a multiple of block_n {block_n}"
        if tp > 1 and int(inter) % block_k:
            return f"routed experts: intermediate per rank {int(inter)} is not a multiple of block_k {block_k}"
    return None


def _fp8_block_shapes(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    why = block_failure(spec, scheme, setup.tp, setup.expert_tp())
    if why is None:
        return
    kv = spec.num_kv_heads
    good = [t for t in range(1, 17) if spec.num_heads % t == 0 and (kv % t == 0 if t <= kv else t % kv == 0)
            and block_failure(spec, scheme, t, setup.expert_tp(t)) is None]
    raise PlanError(
        f"block-quantized weights (weight_block_size {list(scheme.weight_block or ())}) at parallel.tp={setup.tp}: "
        f"{why}; vLLM stops at load or at the first forward ({source('fp8_block_shapes')})",
        fix=("Use parallel.tp in " + ", ".join(map(str, good)) + ", or " if good else "Use ")
        + "a checkpoint quantized per tensor or per channel (no weight_block_size) for this layout.")


def _wna16_layers(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> Iterator[tuple[Tensor, Any, Any]]:
    """(tensor, shape, kernel or None) of each quantized dense layer on this GPU."""
    cap = quant_layout.capability_int(setup.capability)
    if cap is None or scheme.layout != "wna16":
        return
    for t, shape in quant_layout.quantized_linears(spec, scheme, setup.tp):
        if shape is not None:
            yield t, shape, quant_layout.choose(scheme, shape, cap)


def _marlin_act_order_shape(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    for t, shape, kernel in _wna16_layers(spec, scheme, setup):
        if kernel is None:
            raise PlanError(
                f"{t.module}: no vLLM kernel takes this {scheme.linear_format}"
                f"{' act-order' if scheme.act_order else ''} layer at parallel.tp={setup.tp} on compute capability "
                f"{setup.capability} (N per rank {shape.n_fused}, K per rank {shape.k}; "
                f"{source('marlin_act_order_shape')})",
                fix="Use a parallel.tp that keeps N per rank a multiple of 64 and K per rank a multiple of 128 and of "
                "the group size, or a checkpoint without act-order (desc_act: false).")


def _ct_group_partition(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    if scheme.layout != "wna16" or scheme.group <= 0 or (scheme.act_order and scheme.act_order_scales_full):
        return
    for t, shape in quant_layout.quantized_linears(spec, scheme, setup.tp):
        if t.split != "row":
            continue
        if shape is not None and shape.k % scheme.group:
            raise PlanError(
                f"{t.module}: input features per TP rank {shape.k} (parallel.tp={setup.tp}) are not a multiple of the "
                f"checkpoint's group_size {scheme.group} ({source('ct_group_partition')})",
                fix=f"Use a parallel.tp that divides {shape.k_full // scheme.group} groups evenly.")


_FATAL: dict[str, Callable[[ModelSpec, QuantScheme, Setup], None]] = {
    "method_removed": _method_removed, "awq_bits": _awq_bits, "gptq_type": _gptq_type,
    "marlin_group": _marlin_group, "inc_data_type": _inc_data_type, "fp8_block_shapes": _fp8_block_shapes,
    "ct_group_partition": _ct_group_partition, "marlin_act_order_shape": _marlin_act_order_shape,
}


def setup_for(ctx: Any) -> Setup:
    """The rules' view of a plan context (forklift.plan.context.Context)."""
    st = ctx.st
    return Setup(tp=st.tp, dp=st.dp, ep=st.ep, capability=st.capability if st.platform == "cuda" else "",
                 version=ctx.vr.version, dtype_bytes=st.dtype_bytes)


def scheme_for(ctx: Any) -> QuantScheme:
    """The scheme vLLM applies for this recipe: the checkpoint's (or ``serve.quantization``'s) for its load format."""
    recipe = ctx.deployment.recipe
    return loaded_scheme(online_scheme(recipe.serve.quantization, ctx.spec.quant),
                         dummy=recipe.model.load_format == "dummy")


def check(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> None:
    """Raise the first start rule of the scheme's method that this layout breaks."""
    for rule in scheme.rules:
        fn = _FATAL.get(rule)
        if fn is not None:
            fn(spec, scheme, setup)


# ------------------------------------------------------------------------------------------------------ notes


def notes(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> list[str]:
    """What the kernel choice on this GPU means, where it differs from a native run of the checkpoint's format."""
    cap = quant_layout.capability_int(setup.capability)
    if cap is None or scheme.method == "none":
        return []
    out: list[str] = []
    if scheme.layout in ("fp8", "fp8_block") and cap < 89:
        extra = ""
        if scheme.layout == "fp8_block" and scheme.weight_block:
            extra = (f"; its {list(scheme.weight_block)} block scales become one {setup.dtype_bytes}-byte scale per "
                     f"{scheme.weight_block[1]} inputs and output channel (counted in the weights)")
        out.append(f"FP8 weights on compute capability {setup.capability}: vLLM runs them weight-only through Marlin "
                   f"(W8A16, slower in prefill; {where('fp8_weight_only')}){extra}")
    if scheme.layout == "nvfp4" and cap < 100:
        how = "weight-only through Marlin (W4A16)" if cap >= 75 else "emulated (dequantized on every call)"
        out.append(f"NVFP4 weights on compute capability {setup.capability}: no native FP4 GEMM below SM 10.0; vLLM "
                   f"runs them {how} ({where('nvfp4_weight_only')})")
    if scheme.method == "auto_awq":
        fallback = [t.module for t, _, k in _wna16_layers(spec, scheme, setup)
                    if k is not None and k.name == "AutoAWQLinearMethod"]
        if fallback:
            out.append(f"AWQ: {len(fallback)} layer(s) (e.g. {fallback[0]}) fall back to vLLM's unoptimized AWQ "
                       f"kernels ({where('awq_marlin_fallback')})")
    out += _kernel_notes(spec, scheme, setup)
    return out


def _kernel_notes(spec: ModelSpec, scheme: QuantScheme, setup: Setup) -> list[str]:
    """Which kernels hold the quantized layers, where one of them keeps more (or less) than the checkpoint."""
    linears = quant_layout.quantized_linears(spec, scheme, setup.tp)
    layout = quant_layout.StoredLayout(spec, scheme, [t for t, _ in linears], tp=setup.tp,
                                       capability=setup.capability, act_bytes=float(setup.dtype_bytes))
    if layout.trivial:
        return []
    delta = 0.0
    for t, _ in linears:
        got = layout.tensor_bytes(t)
        if got is not None:
            ways = {"col": setup.tp, "row": setup.tp, "kv": t.kv_ways(setup.tp, spec.num_kv_heads)}.get(t.split, 1)
            delta += got - t.numel / ways * scheme.linear_bytes
    if not layout.used or abs(delta) < 0.0005 * GIB:
        return []
    kernels = ", ".join(f"{name} ({round(n)} layers)" for name, n in sorted(layout.used.items(), key=lambda kv: -kv[1]))
    return [f"quantized layers on compute capability {setup.capability}: {kernels}; their stored layout differs from "
            f"the checkpoint's by {delta / GIB:+.3f} GiB per rank (forklift/model/quant_layouts.yaml kernels)"]
