"""vLLM's KV sizing on an integrated GPU with unified memory (GB10: DGX Spark and its OEM twins), per release.

Forms, from vLLM's code (0.12.0 - 0.29.x; the lines did not change in the releases read):

* Budget: ``requested = total x gpu_memory_utilization`` with ``total`` cudaMemGetInfo's total (121.69 GiB on a
  current GB10 kernel, 119.56 - 121.06 on others): utils/mem_utils.py MemorySnapshot.measure, v1/worker/utils.py
  request_memory.
* Free memory: on an integrated GPU MemorySnapshot.measure replaces cudaMemGetInfo's free by
  ``psutil.virtual_memory().available`` (MemAvailable), because cudaMemGetInfo there counts MemFree only
  (0.12-0.19: the (8,7)/(11,0)/(12,1) capability list; 0.20+: platforms/cuda.py is_integrated_gpu). The startup
  check (request_memory) refuses when that reading at the init snapshot is below ``requested``; the snapshot comes
  after the CUDA context and the communicators, so it reads ``pre_snapshot_gib`` below the node's MemAvailable.
* Non-torch memory: memory_profiling's ``non_torch_increase`` is the growth of (total - free) - torch reserved from
  the init snapshot to after the profile run; on unified memory every host-side byte the node gains in between
  counts (the input batch's pinned token table, process RSS, the page cache the low watermark keeps, a raised
  watermark): forklift.plan.terms.profile_host and :func:`watermark_cost`.
* CUDA graphs: profile_cudagraph_memory (v1/worker/gpu_model_runner.py) takes torch.cuda.mem_get_info around the
  first and second capture; on an integrated GPU that free reading is MemFree-like, so the estimate carries host
  activity during the captures: ``cudagraph_excess_gib`` on top of forklift's device form.
* Compile cache (vLLM 0.26.0, torch 2.11, triton 3.x): on a cold torch.compile cache the first forward compiles
  inside ``memory_profiling`` (v1/worker/gpu_worker.py determine_available_memory: profile_run, then
  profile_cudagraph_memory, both before the after-profile snapshot), and ``vllm/env_override.py`` sets
  TORCHINDUCTOR_COMPILE_THREADS=1, so Dynamo, Inductor and Triton's compiler all run in the worker process itself.
  What they leave allocated when the after-profile snapshot is taken is counted: on an integrated GPU the free
  reading is the node's MemAvailable, so ``non_torch_increase`` takes every byte of the process's host heap the
  compile kept (graphs, generated code, the compiler's arenas) as well as the device side (the modules of every
  autotuned candidate loaded, Inductor's L2-sized flush buffer, terms.compile_flush, and Triton's 256 MiB
  benchmarking buffer, triton/backends/nvidia/driver.py get_empty_cache_for_benchmark, taken through torch while
  a @triton.autotune kernel with several configs is first timed, triton/runtime/autotuner.py). A warm cache loads
  the compiled artifact and the autotuning timings vLLM has Triton cache on disk (TRITON_CACHE_AUTOTUNING=1,
  env_override.py; Autotuner.check_disk_cache), so none of it happens. On a discrete GPU cudaMemGetInfo sees only
  the device side, which is why the H200's cold/warm difference is the flush buffer alone. Form: a cold start's
  pool is ``cold_compile_gib`` per rank smaller than a warm restart's with the same settings (one constant per
  rank; only where the model is compiled, not eager). It is fitted, like the rest, from train threads that state
  both cache states for one setting; without one it is None and not applied.

* Repeat boots (read at the 0.2x text of the files above): the pool is ``requested - (weights + torch_peak_increase
  + non_torch_increase) - cudagraph_estimate`` (gpu_worker.py determine_available_memory, the estimate applied while
  VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is set, the default since 0.21), with ``requested = ceil(total x
  utilization)`` from cudaMemGetInfo's *total* (request_memory). The free reading at the init snapshot enters only
  the startup check: ``non_torch_increase`` is a difference of two snapshots (mem_utils.py memory_profiling,
  ``after_profile - before_create``), so what the node had free before vLLM started (page cache, other tenants)
  cancels, and only what changes MemAvailable *during* the load and profile moves the pool. The threads give none of
  these movers for both boots of a repeat (vLLM logs them at DEBUG and INFO): the host heap the load and the compile
  leave behind at the after-profile snapshot, the page cache the kernel holds back from MemAvailable while the load
  fills it (at most the low watermark, :func:`watermark_cost`), and the CUDA-graph estimate, which
  profile_cudagraph_memory (gpu_model_runner.py) takes from torch.cuda.mem_get_info (MemFree on an integrated GPU,
  not replaced by MemAvailable) around the first and the second capture and extrapolates as ``first + (graphs - 1) x
  second``: a few MiB of page-cache fill or reclaim during the second capture move the estimate by that much times
  the number of captured graphs. So the boot-to-boot spread is not predicted from the free memory at start; it stays
  the band (``pool_band_gib``).

Constants: data/gb10.yaml ``fitted``, chosen on the train threads of tests/data/calibration/gb10-public only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from forklift.plan import rules
from forklift.yamlio import load_data, shipped

GIB = 2**30
KIB_PER_GIB = 2**20


@cache
def data() -> dict[str, Any]:
    loaded: dict[str, Any] = shipped("forklift.plan", "gb10.yaml")
    return loaded


@dataclass(frozen=True)
class FreeAtInit:
    """vLLM's free reading at the init snapshot on a clean node, GiB: the train median and range."""

    median: float
    low: float
    high: float


@dataclass(frozen=True)
class Gb10Terms:
    """The unified-memory terms for one vLLM release."""

    version: str
    free_reading: str
    graph_reading: str
    verified: bool
    """False for releases older than the ones the constants were fitted on."""
    pre_snapshot_gib: float
    free_at_init: FreeAtInit
    cudagraph_excess_gib: float
    pool_band_gib: float
    cold_compile_gib: float | None = None
    """How much smaller a cold torch.compile start's pool is than a warm restart's, per rank, GiB; None: no train
    pair (not applied)."""


@cache
def terms_for(version: str) -> Gb10Terms:
    """Every ``versions`` entry not above ``version``, merged in order, with the fitted constants."""
    table: dict[str, dict[str, Any]] = data()["versions"]
    vkey = rules.version_key(version)
    keys = sorted(table, key=rules.version_key)
    merged: dict[str, Any] = {}
    for key in [k for k in keys if rules.version_key(k) <= vkey] or keys[:1]:
        merged.update(table[key])
    fitted = data()["fitted"]
    free = fitted["free_at_init_gib"]
    return Gb10Terms(
        version=version, free_reading=str(merged["free_reading"]), graph_reading=str(merged["graph_reading"]),
        verified=vkey >= rules.version_key(str(merged["fitted_from"])),
        pre_snapshot_gib=float(fitted["pre_snapshot_gib"]),
        free_at_init=FreeAtInit(float(free["median"]), float(free["low"]), float(free["high"])),
        cudagraph_excess_gib=float(fitted["cudagraph_excess_gib"]), pool_band_gib=float(fitted["pool_band_gib"]),
        cold_compile_gib=None if fitted.get("cold_compile_gib") is None else float(fitted["cold_compile_gib"]))


def cold_compile_bytes(g: Gb10Terms, *, compiled: bool, compile_cache: str) -> float:
    """What a cold torch.compile start adds to a unified-memory rank's non-torch memory (module docstring): the
    fitted constant on a cold, compiled start; 0 on a warm restart, an eager start, or where nothing was fitted."""
    if not compiled or compile_cache != "cold" or g.cold_compile_gib is None:
        return 0.0
    return g.cold_compile_gib * GIB


# ------------------------------------------------------------------------------------------------ watermarks


@dataclass(frozen=True)
class Watermarks:
    """The zone watermarks summed over the node, GiB."""

    min: float
    low: float
    high: float


def default_min_free_kbytes(managed_gib: float) -> int:
    """mm/page_alloc.c init_per_zone_wmark_min: int_sqrt(lowmem_kbytes x 16), clamped to [128, 262144]."""
    return max(128, min(262144, math.isqrt(int(managed_gib * KIB_PER_GIB) * 16)))


def watermarks(min_free_kbytes: int, managed_gib: float, scale_factor: int) -> Watermarks:
    """mm/page_alloc.c __setup_per_zone_wmarks: low = min + step, high = min + 2 step, with
    step = max(min / 4, managed x watermark_scale_factor / 10000)."""
    floor = min_free_kbytes / KIB_PER_GIB
    step = max(floor / 4, managed_gib * scale_factor / 10000)
    return Watermarks(floor, floor + step, floor + 2 * step)


@dataclass(frozen=True)
class WatermarkCost:
    """What a sysctl set costs against the kernel's defaults, GiB.

    ``reserve``: MemAvailable lower at any time (calculate_totalreserve_pages holds ``high`` out), which vLLM's
    startup check sees. ``page_cache``: the part of the page cache si_mem_available keeps out (min(cache / 2,
    low)) once the load has filled the cache; it grows between the init snapshot and the after-profile snapshot,
    so on unified memory it is non-torch memory and comes off the KV pool. ``boost``: how much more a
    fragmentation event can hold out of MemAvailable (boost_watermark, up to high x boost factor / 10000) until
    kswapd resets it; an upper bound, not counted in the plan.
    """

    reserve: float
    page_cache: float
    boost: float


@cache
def node_profile_sysctl(name: str) -> dict[str, int]:
    """The sysctl values of a bundled node profile (forklift/node/profiles/NAME.yaml), read as data: planning does
    not import the node package (it brings the runners)."""
    path = resources.files("forklift") / "node" / "profiles" / f"{name}.yaml"
    if not path.is_file():
        return {}
    loaded = load_data(path.read_text()) or {}
    return {str(k): int(v) for k, v in (loaded.get("sysctl") or {}).items()}


def watermark_cost(sysctl: dict[str, int], managed_gib: float | None = None) -> WatermarkCost:
    """The cost of a node profile's sysctl values on a GB10 node, against the kernel defaults."""
    k = data()["kernel"]
    managed = float(managed_gib or k["managed_gib"])
    scale_default = int(k["watermark_scale_factor"])
    base = watermarks(default_min_free_kbytes(managed), managed, scale_default)
    floor = int(sysctl.get("vm.min_free_kbytes", default_min_free_kbytes(managed)))
    scale = int(sysctl.get("vm.watermark_scale_factor", scale_default))
    boost_factor = int(sysctl.get("vm.watermark_boost_factor", k["watermark_boost_factor"]))
    wm = watermarks(floor, managed, scale)
    return WatermarkCost(reserve=max(0.0, wm.high - base.high), page_cache=max(0.0, wm.low - base.low),
                         boost=wm.high * boost_factor / 10000)


# --------------------------------------------------------------------------------------------- the verdict

VERDICTS = ("fits", "does not fit", "too close to call")


def verdict(margin_gib: float, band_gib: float) -> str:
    """A decided verdict only outside the band the terms' spread gives."""
    if margin_gib > band_gib:
        return "fits"
    if margin_gib < -band_gib:
        return "does not fit"
    return "too close to call"
