"""The candidates ``tune`` may measure: the settings the plan says fit, ranked by the plan's roofline.

Knobs (each a typed recipe field): ``serve.max_num_seqs``, ``serve.max_num_batched_tokens`` (vLLM's V1 engine
always chunks prefills; this is the chunk, so it is also the chunked-prefill threshold), ``serve.kv_cache_dtype``
(fp8 on CUDA only), ``serve.enable_prefix_caching`` and, when the recipe speculates with a fixed K,
``serve.speculative.num_speculative_tokens`` (half and double the recipe's K). The recipe as given is the
baseline: vLLM's defaults for every knob it leaves unset, which the plan states (``Plan.max_num_seqs``,
``Plan.max_num_batched_tokens``).
CUDA-graph capture sizes have no typed field in the recipe, so they are not searched (the note says so).

Pruning, before anything starts: a value equivalent to the baseline at the workload's concurrency is dropped
(``max_num_seqs`` at or above the number of users), a candidate whose plan does not fit or that the planner refuses
is dropped with its reason, and ``max_num_seqs`` whose requests' KV would not fit the planned pool is dropped.
Ranking: a small model of the workload on the plan's roofline (decode step time interpolated between the
single-stream and the batched bound, prefill at the plan's compute bound, every other stream's prefill stalling a
request's decode once, and when ``max_num_seqs`` is below the users the closed-loop queue for a slot, ``latency``)
gives each latency's mean and spread across requests, so its p95; the predicted goodput is the request rate times
the share of requests within every limit (per-request goodput, as ``tune`` measures it), so a queue whose mean TTFT
fits but whose tail does not loses the requests in its tail; the search measures in that order. Once the baseline
has run, ``calibrate`` turns its measured TTFT and TPOT medians into a prefill rate and step time, and ``rerank``
predicts the kept and reserve candidates again with them (the roofline can be off several-fold on a shared host).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from forklift.errors import ForkliftError
from forklift.plan import Plan, Unplanned, for_launch
from forklift.recipe.deployment import Deployment
from forklift.tune.slo import TuneSlo
from forklift.tune.workloads import Workload

TOKENS_PER_WORD = 1.3
MNBT_VALUES = (256, 512, 1024, 2048, 4096, 8192, 16384)
PlanFn = Callable[[Deployment], Plan | Unplanned]
Z95 = 1.645
"""The standard normal's 95th percentile."""
MIN_SPREAD = 0.1
"""A predicted latency's spread is taken as at least this share of its mean (the model's own error)."""


@dataclass(frozen=True)
class Candidate:
    name: str
    sets: tuple[str, ...]
    predicted: float = 0.0
    """The plan's predicted goodput (requests/s) under the SLO: the ranking, not a measurement."""
    why: str = ""
    plan_facts: dict[str, Any] = field(default_factory=dict)
    predicted_p95_ms: dict[str, float] = field(default_factory=dict)
    """The model's TTFT and TPOT p95 (``latency``) behind ``predicted``."""

    @property
    def is_baseline(self) -> bool:
        return not self.sets

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sets": list(self.sets), "predicted_goodput_req_s": round(self.predicted, 4),
                "why": self.why, "plan": self.plan_facts,
                "predicted_p95_ms": self.predicted_p95_ms}


@dataclass(frozen=True)
class Space:
    candidates: tuple[Candidate, ...]
    """The baseline first, then the rest in the plan's order."""
    pruned: tuple[tuple[str, str], ...]
    """(sets, reason) of every candidate the plan dropped."""
    notes: tuple[str, ...]
    reserve: tuple[Candidate, ...] = ()
    """Candidates that fit but ranked below ``max_candidates``: ``rerank`` may bring them in."""
    plans: dict[str, Plan] = field(default_factory=dict, compare=False, repr=False)
    """Each candidate's plan by name (the baseline's too), for ``rerank``."""

    def to_json(self) -> dict[str, Any]:
        return {"candidates": [c.to_json() for c in self.candidates],
                "pruned": [{"sets": s, "reason": r} for s, r in self.pruned], "notes": list(self.notes)}


@dataclass(frozen=True)
class Measured:
    """The baseline's speed as measured on its first runs, in place of the plan's roofline (``calibrate``)."""

    prefill_tok_s: float
    step_scale: float
    """Measured decode step over the roofline's."""


def _step(plan: Plan, batch: int) -> float:
    t1 = 1.0 / max(plan.roofline.decode_tok_s_single, 1e-9)
    big = max(1, plan.roofline.concurrency)
    t_big = big / max(plan.roofline.decode_tok_s_aggregate, 1e-9)
    return t1 + (t_big - t1) * (batch - 1) / (big - 1) if big > 1 else t1


@dataclass(frozen=True)
class Latency:
    """A candidate's predicted request rate and latencies on a workload: each latency's mean and its spread
    (standard deviation) across requests, in seconds. A ranking aid (``latency``)."""

    rate: float
    """Requests completed per second (every request, met or not)."""
    ttft: float
    ttft_sd: float
    tpot: float
    tpot_sd: float
    e2e: float
    e2e_sd: float

    @property
    def ttft_p95(self) -> float:
        return self.ttft + Z95 * self.ttft_sd

    @property
    def tpot_p95(self) -> float:
        return self.tpot + Z95 * self.tpot_sd

    @property
    def e2e_p95(self) -> float:
        return self.e2e + Z95 * self.e2e_sd


def _spread(xs: Sequence[float]) -> tuple[float, float]:
    mean = sum(xs) / len(xs)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def latency(plan: Plan, workload: Workload, measured: Measured | None = None) -> Latency:
    """The workload's latencies on this plan (see the module's doc): per request, its own prefill (its prompt at
    the prefill rate, plus one step per further chunk) and decode (its tokens at the TPOT); TPOT is the step plus
    the stalls from the other streams' prefills (a Poisson count, one per other stream on average; the chunk
    spreads a stall over steps, it does not shrink it); and, when
    ``max_num_seqs`` is below the users, the wait for a slot in a closed loop: each user sends its next request
    when the last one ends, so ``users - batch`` requests always wait, and a new one waits for that many slot
    releases. With service times of mean S and spread sd over ``batch`` slots, that wait has mean
    ``(users - batch) * S / batch`` and spread ``sd * sqrt(users - batch) / batch`` (the time to that many
    completions of ``batch`` renewal processes)."""
    users = workload.concurrency
    batch = max(1, min(plan.max_num_seqs, users))
    step = _step(plan, batch) * (measured.step_scale if measured else 1.0)
    rate_in = max(measured.prefill_tok_s if measured else plan.roofline.prefill_tok_s, 1e-9)
    requests = workload.requests or ()
    prompts = [len(r.prompt.split()) * TOKENS_PER_WORD for r in requests] or [workload.mean_words * TOKENS_PER_WORD]
    outs = [max(1.0, float(r.output_len)) for r in requests] or [max(1.0, workload.mean_output)]
    chunk = max(1, plan.max_num_batched_tokens)
    firsts = [p / rate_in + (math.ceil(p / chunk) - 1) * step for p in prompts]
    first, first_sd = _spread(firsts)
    out = sum(outs) / len(outs)
    stall = sum(p / rate_in for p in prompts) / len(prompts) / out
    others = batch - 1
    tpot, tpot_sd = step + others * stall, math.sqrt(others) * stall
    service, service_sd = _spread([f + o * tpot for f, o in zip(firsts, outs, strict=True)])
    ahead = users - batch
    wait, wait_sd = ahead * service / batch, service_sd * math.sqrt(ahead) / batch
    return Latency(batch / service, first + wait, math.hypot(first_sd, wait_sd), tpot, tpot_sd,
                   wait + service, math.hypot(service_sd, wait_sd))


def _within(limit_ms: float | None, mean_s: float, sd_s: float) -> float:
    """The share of requests within the limit, the latency taken as normal; its spread is at least
    ``MIN_SPREAD`` of its mean (the model's own error)."""
    if limit_ms is None:
        return 1.0
    sd = max(sd_s, MIN_SPREAD * mean_s, 1e-12)
    return 0.5 * math.erfc((mean_s - limit_ms / 1000) / (sd * math.sqrt(2)))


def predict(plan: Plan, workload: Workload, slo: TuneSlo, measured: Measured | None = None) -> float:
    """Predicted goodput (req/s) of the workload on this plan: the request rate times the share of requests
    within every limit of the SLO (per-request goodput, as measured), each latency from ``latency``."""
    lat = latency(plan, workload, measured)
    limits = slo.per_request()
    return (lat.rate * _within(limits.ttft_ms, lat.ttft, lat.ttft_sd) * _within(limits.tpot_ms, lat.tpot, lat.tpot_sd)
            * _within(limits.e2e_ms, lat.e2e, lat.e2e_sd))


def _p95(plan: Plan, workload: Workload, measured: Measured | None = None) -> dict[str, float]:
    lat = latency(plan, workload, measured)
    return {"ttft_p95": round(1000 * lat.ttft_p95, 1), "tpot_p95": round(1000 * lat.tpot_p95, 2)}


def _facts(plan: Plan) -> dict[str, Any]:
    return {"max_num_seqs": plan.max_num_seqs, "max_num_batched_tokens": plan.max_num_batched_tokens,
            "kv_cache_dtype": plan.kv_cache_dtype, "kv_tokens": plan.kv_tokens, "fits": plan.fits,
            "decode_tok_s_aggregate": plan.roofline.decode_tok_s_aggregate}


def _label(sets: tuple[str, ...]) -> str:
    if not sets:
        return "baseline"
    return " ".join(s.removeprefix("serve.").replace("max_num_batched_tokens", "mnbt")
                    .replace("enable_prefix_caching", "prefix_caching")
                    .replace("speculative.num_speculative_tokens", "spec_k") for s in sets)


def build(deployment: Deployment, workload: Workload, slo: TuneSlo, *, plan_fn: PlanFn = for_launch,
          max_candidates: int = 8, explicit: Sequence[Sequence[str]] = ()) -> Space:
    """The baseline and up to ``max_candidates`` others, pruned and ranked by the plan (see the module's doc).
    ``explicit``: these candidates (``serve.*`` sets each) instead of the grid, still checked by the plan and
    kept in the given order."""
    from forklift.errors import TuneError

    base_plan = plan_fn(deployment)
    if not isinstance(base_plan, Plan) or not base_plan.fits:
        why = base_plan.error if isinstance(base_plan, Unplanned) else base_plan.error
        raise TuneError(f"the recipe itself has no plan that fits ({why})",
                        fix="Make `forklift plan RECIPE` fit first; tune searches around a deployment that starts.")
    serve = deployment.recipe.serve
    users = workload.concurrency
    notes = ["CUDA-graph capture sizes are not searched: the recipe has no typed field for them",
             f"chunked prefill: vLLM's V1 engine always chunks; max_num_batched_tokens "
             f"(baseline {base_plan.max_num_batched_tokens}) is the chunk"]
    prompt_tokens = workload.mean_words * TOKENS_PER_WORD
    per_request_kv = prompt_tokens + workload.mean_output
    pruned: list[tuple[str, str]] = []

    seqs: list[int | None] = [None]
    for v in sorted({max(1, users // 4), max(1, users // 2)}):
        if v >= base_plan.max_num_seqs:
            pruned.append((f"serve.max_num_seqs={v}", f"not below the baseline's {base_plan.max_num_seqs}"))
        elif v >= users:
            pruned.append((f"serve.max_num_seqs={v}", f"the workload has only {users} users"))
        else:
            seqs.append(v)
    if base_plan.max_num_seqs > users:
        pruned.append((f"serve.max_num_seqs>={users}", f"same as the baseline's {base_plan.max_num_seqs} at "
                       f"{users} users"))
    elif base_plan.kv_tokens >= users * per_request_kv:
        seqs.append(users)
    else:
        pruned.append((f"serve.max_num_seqs={users}", f"{users} requests of ~{per_request_kv:.0f} tokens exceed "
                       f"the planned KV pool ({base_plan.kv_tokens} tokens)"))
    mnbt: list[int | None] = [None]
    for v in MNBT_VALUES:
        if v == base_plan.max_num_batched_tokens:
            continue
        if v > max(2 * prompt_tokens, base_plan.max_num_batched_tokens) or v > base_plan.max_model_len * 4:
            pruned.append((f"serve.max_num_batched_tokens={v}", f"above twice the mean prompt ({prompt_tokens:.0f})"))
            continue
        if v < base_plan.max_num_batched_tokens // 8:
            pruned.append((f"serve.max_num_batched_tokens={v}", "below an eighth of the baseline's chunk"))
            continue
        mnbt.append(v)
    kv: list[str | None] = [None]
    if base_plan.platform == "cuda" and serve.kv_cache_dtype == "auto":
        kv.append("fp8")
    elif base_plan.platform != "cuda":
        notes.append("fp8 KV is not offered: vLLM-CPU")
    prefix: list[bool | None] = [None]
    if serve.enable_prefix_caching is not None:
        prefix.append(not serve.enable_prefix_caching)
    elif not workload.shared_prefix:
        prefix.append(False)
    else:
        notes.append("prefix caching: vLLM's default (on) kept for a workload with shared prefixes")

    depth: list[int | None] = [None]
    spec = serve.speculative
    if spec is None:
        notes.append("speculative depth: the recipe decodes without speculation")
    elif spec.num_speculative_tokens_per_batch_size is not None:
        notes.append("speculative depth: the recipe sets K per batch size; it is kept")
    else:
        k0 = spec.num_speculative_tokens
        depth += sorted({max(1, k0 // 2), 2 * k0} - {k0})

    combos: list[tuple[str, ...]] = [tuple(c) for c in explicit]
    for s, m, k, p, d in [] if explicit else itertools.product(seqs, mnbt, kv, prefix, depth):
        sets: list[str] = []
        if s is not None:
            sets.append(f"serve.max_num_seqs={s}")
        if m is not None:
            if s is not None and m < s:
                continue
            sets.append(f"serve.max_num_batched_tokens={m}")
        if k is not None:
            sets.append(f"serve.kv_cache_dtype={k}")
        if p is not None:
            sets.append(f"serve.enable_prefix_caching={str(p).lower()}")
        if d is not None:
            sets.append(f"serve.speculative.num_speculative_tokens={d}")
        if len(sets) <= 2:  # one or two knobs away from the baseline: the search stays local
            combos.append(tuple(sets))

    scored: list[Candidate] = []
    plans: dict[str, Plan] = {"baseline": base_plan}
    base = Candidate("baseline", (), predict(base_plan, workload, slo), "the recipe as given (vLLM's defaults "
                     "where it sets nothing)", _facts(base_plan), _p95(base_plan, workload))
    for combo in combos:
        if not combo:
            continue
        try:
            plan = plan_fn(deployment.with_sets(list(combo)))
        except ForkliftError as exc:
            pruned.append((" ".join(combo), f"the planner refuses it: {exc}"))
            continue
        if not isinstance(plan, Plan):
            pruned.append((" ".join(combo), f"no plan: {plan.error}"))
            continue
        if not plan.fits:
            pruned.append((" ".join(combo), f"does not fit: {plan.error}"))
            continue
        scored.append(Candidate(_label(combo), combo, predict(plan, workload, slo), "", _facts(plan),
                                _p95(plan, workload)))
        plans[scored[-1].name] = plan
    if not explicit:
        scored.sort(key=lambda c: (-c.predicted, len(c.sets), c.name))
    reserve: list[Candidate] = []
    if len(scored) > max_candidates:
        pruned += [(" ".join(c.sets), f"ranked {i + 1} of {len(scored)} by the plan (keeping {max_candidates})")
                   for i, c in enumerate(scored) if i >= max_candidates]
        scored, reserve = scored[:max_candidates], scored[max_candidates:]
    return Space((base, *scored), tuple(pruned), tuple(notes), tuple(reserve), plans)


def calibrate(plan: Plan, workload: Workload, ttft_p50_ms: float, tpot_p50_ms: float) -> Measured | None:
    """The baseline's measured medians -> the prefill rate and decode step they imply, when the baseline runs
    every user at once (then TTFT's median is about one prefill, and TPOT's median the step plus the other streams'
    prefills, as ``predict`` has it); None otherwise. The step is kept within 1/4..4x the roofline's."""
    users = workload.concurrency
    if plan.max_num_seqs < users or ttft_p50_ms <= 0 or tpot_p50_ms <= 0:
        return None
    prompt = workload.mean_words * TOKENS_PER_WORD
    rate = prompt / (ttft_p50_ms / 1000)
    rest = tpot_p50_ms / 1000 - (users - 1) * (prompt / rate) / max(1.0, workload.mean_output)
    return Measured(rate, min(4.0, max(0.25, rest / _step(plan, users))))


def rerank(sp: Space, workload: Workload, slo: TuneSlo, measured: Measured) -> tuple[Candidate, ...]:
    """The candidates after the baseline, predicted again with the measured speed and sorted, as many as were
    kept, drawn from the kept and the reserve."""
    pool = [replace(c, predicted=predict(sp.plans[c.name], workload, slo, measured),
                    predicted_p95_ms=_p95(sp.plans[c.name], workload, measured))
            for c in (*sp.candidates[1:], *sp.reserve) if c.name in sp.plans]
    pool.sort(key=lambda c: (-c.predicted, len(c.sets), c.name))
    return tuple(pool[:len(sp.candidates) - 1])
