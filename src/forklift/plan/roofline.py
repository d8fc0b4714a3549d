"""Speed bounds from first principles: bytes read per token over memory bandwidth, FLOPs over peak compute."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forklift.hardware.profiles import HardwareProfile, NetworkProfile
from forklift.model.spec import ModelSpec
from forklift.plan.result import Roofline


@dataclass(frozen=True)
class StageCost:
    """One PP stage as seen by one of its TP ranks."""

    active_bytes: float  # weights read per decoded token (top-k experts)
    expert_bytes: float  # all routed-expert bytes on the rank
    active_params: float
    kv_bytes_per_token: int
    layers: int
    hardware: HardwareProfile


def _distinct_fraction(spec: ModelSpec, batch: int) -> float:
    """Fraction of a layer's routed experts touched by ``batch`` tokens: 1 - (1 - k/E)^B."""
    if spec.moe is None or not spec.moe.n_routed:
        return 1.0
    k, e = spec.moe.top_k, spec.moe.n_routed
    return 1.0 - (1.0 - k / e) ** batch


def compute(spec: ModelSpec, stages: Sequence[StageCost], *, tp: int, tp_over_network: bool, pp: int,
            network: NetworkProfile, concurrency: int, context: int, compute_format: str) -> Roofline:
    """Decode bounds (single stream and at ``concurrency``) and the prefill compute bound."""
    hop = network.latency_us * 1e-6
    # TP: two all-reduces per layer when ranks talk over the network; PP: one send per stage boundary,
    # plus the sampled token back to the first stage.
    comm = 0.0
    if tp > 1 and tp_over_network:
        comm += 2 * spec.num_layers * hop
    if pp > 1:
        comm += pp * hop
    single_times = []
    total_active = 0.0
    critical = 0.0
    for st in stages:
        bytes_read = st.active_bytes + context * st.kv_bytes_per_token
        single_times.append(bytes_read / (st.hardware.bandwidth_gbs * 1e9))
        total_active += st.active_bytes * tp
        critical += bytes_read
    single = 1.0 / (sum(single_times) + comm) if single_times else 0.0

    batch = max(1, concurrency)
    frac_single = _distinct_fraction(spec, 1)
    frac_batch = _distinct_fraction(spec, batch)
    step_times = []
    for st in stages:
        dense_bytes = st.active_bytes - st.expert_bytes * frac_single
        bytes_step = dense_bytes + st.expert_bytes * frac_batch + batch * context * st.kv_bytes_per_token
        mem_t = bytes_step / (st.hardware.bandwidth_gbs * 1e9)
        flop_t = 2 * st.active_params * batch / (st.hardware.peak_tflops(compute_format) * 1e12)
        step_times.append(max(mem_t, flop_t))
    pipelined = pp > 1 and batch >= pp
    aggregate = batch / (max(step_times) + comm / pp) if pipelined else batch / (sum(step_times) + comm)

    prefill = min((st.hardware.peak_tflops(compute_format) * 1e12) / (2 * st.active_params)
                  for st in stages if st.active_params > 0) if stages else 0.0
    return Roofline(
        decode_tok_s_single=round(single, 2), decode_tok_s_aggregate=round(aggregate, 2), concurrency=batch,
        prefill_tok_s=round(prefill, 1), active_gb_per_token=round(total_active / 1e9, 3),
        critical_path_gb=round(critical / 1e9, 3), network_s_per_token=round(comm, 6), decode_context=context,
    )
