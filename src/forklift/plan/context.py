"""The plan's context: the settings as vLLM will resolve them, the node profiles and the ranks' placement.

``context`` checks the layout as vLLM would and builds the ``Context`` every step of one plan shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from forklift.errors import HardwareProfileError, PlanError
from forklift.hardware.detect import local_amx
from forklift.hardware.profiles import HardwareProfile
from forklift.hardware.profiles import get as get_profile
from forklift.model.load import SpecSource
from forklift.model.spec import ModelSpec
from forklift.plan import encoder, kvspecs, layout, quant_rules, rules
from forklift.recipe.deployment import Deployment

_MTP_METHODS = ("mtp",)


@dataclass(frozen=True)
class Settings:
    """The knobs as vLLM will resolve them (recipe values, else vLLM's defaults for this hardware/version)."""

    platform: str
    util: float | None
    mnbt: int
    seqs: int
    max_model_len: int
    kv_dtype: str
    dtype_bytes: int
    block: int | None
    tp: int
    pp: int
    dcp: int
    eager: bool
    include_mtp: bool
    partition: list[int]
    dp: int = 1
    ep: bool = False
    num_spec: int = 0
    capability: str = ""
    runner: str = "v1"
    prefix_caching: bool | None = None
    kv_budget: int | str | None = None
    compile_cache: str = "cold"
    """torch.compile's cache of this model and settings on the nodes: 'cold' (a first start; what a plan assumes and
    what C0 was chosen on) or 'warm' (a restart: no first-call autotuning, terms.compile_flush; on unified memory
    no compile residue either, gb10.cold_compile_bytes)."""


@dataclass(frozen=True)
class Context:
    """What every step of one plan shares."""

    deployment: Deployment
    src: SpecSource
    vr: rules.VersionRules
    profiles: list[HardwareProfile]
    place: layout.Placement
    st: Settings

    @property
    def spec(self) -> ModelSpec:
        return self.src.spec

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return layout.stage_ranges(self.st.partition)

    def profile_of(self, rank: int) -> HardwareProfile:
        return self.profiles[self.place.node_of(rank)]

    def kv_inputs(self) -> kvspecs.KvInputs:
        st = self.st
        return kvspecs.KvInputs(
            tp=st.tp, kv_dtype=st.kv_dtype, model_dtype_bytes=st.dtype_bytes, capability=st.capability,
            platform=st.platform, max_model_len=st.max_model_len, mnbt=st.mnbt, block=st.block,
            amx=self.profiles[0].amx, dcp=st.dcp, pp=st.pp, runner=st.runner, num_spec=st.num_spec,
            include_mtp=st.include_mtp, prefix_caching=st.prefix_caching)


def node_profiles(deployment: Deployment) -> list[HardwareProfile]:
    """Hardware profile per node: the local CPU's AMX when it plans for this machine, and the memory measured by
    ``forklift hw --node`` on unified-memory nodes (free at launch, and the total)."""
    out = []
    for node in deployment.nodes:
        prof = get_profile(node.hardware)
        if prof.kind == "cpu" and node.is_local:
            prof = prof.model_copy(update={"amx": local_amx()})
        measured = deployment.facts.get(node.host)
        if prof.unified and measured is not None and measured.mem_available_gib:
            update = {"available_gib": measured.mem_available_gib}
            if measured.mem_total_gib and prof.kind == "cuda":
                update["memory_gib"] = measured.mem_total_gib
            prof = prof.model_copy(update=update)
        out.append(prof)
    if len({p.kind for p in out}) > 1:
        raise HardwareProfileError("the recipe mixes CPU and GPU nodes", fix="Use one kind of hardware for every node.")
    return out


def _check_version(spec: ModelSpec, release: rules.VersionRules) -> None:
    if spec.vllm_min and rules.version_key(release.version) < rules.version_key(spec.vllm_min):
        raise PlanError(f"vLLM {release.version} does not serve {spec.architecture} (first in {spec.vllm_min})",
                        fix=f"Run vLLM {spec.vllm_min} or newer (--vllm-version), or use the model's other "
                        "architecture name if its config offers one.")


_CPU_DEFAULT_MNBT = 2048  # config/scheduler.py SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS


def settings(deployment: Deployment, spec: ModelSpec, profiles: list[HardwareProfile],
             release: rules.VersionRules, compile_cache: str = "cold") -> Settings:
    s, par = deployment.recipe.serve, deployment.recipe.parallel
    prof = min(profiles, key=lambda p: p.memory_gib)
    platform = prof.kind
    d_mnbt, d_seqs = rules.batch_defaults(release, platform, prof.memory_gib, prof.name, prof.compute_capability,
                                          workers=par.tp * par.pp)
    dtype_bytes = {"bfloat16": 2, "float16": 2, "float32": 4}.get(s.dtype, spec.dtype_bytes)
    quantized = spec.quant.method != "none" or s.quantization is not None
    spec_method = s.speculative.method if s.speculative is not None else None
    max_len = s.max_model_len or spec.default_max_len or 2048  # vLLM's derived length, else its 2048
    mnbt = s.max_num_batched_tokens or d_mnbt
    if platform == "cpu" and spec.attention == "mla" and not prof.amx:  # vLLM's model_config.use_mla
        # platforms/cpu.py check_and_update_config: MLA without AMX kernels ("MLA is enabled on a non-GPU platform;
        # forcing chunked prefill and prefix caching to be disabled") sets max_num_batched_tokens to
        # max(max_model_len, SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048), whatever was asked
        mnbt = max(max_len, _CPU_DEFAULT_MNBT)
    return Settings(
        platform=platform,
        util=None if platform == "cpu" else (s.gpu_memory_utilization or release.gpu_memory_utilization),
        mnbt=mnbt, seqs=s.max_num_seqs or d_seqs,
        max_model_len=max_len,
        kv_dtype=kvspecs.resolved_kv_dtype(s.kv_cache_dtype, spec, release, prof.compute_capability),
        dtype_bytes=dtype_bytes, block=s.block_size, tp=par.tp, pp=par.pp, dcp=par.dcp,
        eager=s.enforce_eager or platform == "cpu", include_mtp=spec_method in _MTP_METHODS,
        partition=layout.pp_partition(spec.num_layers, par.pp, par.pp_layer_partition), dp=par.dp,
        ep=s.enable_expert_parallel, num_spec=s.speculative.num_speculative_tokens if s.speculative else 0,
        capability=prof.compute_capability,
        runner=release.runner_for(spec.architecture, moe=spec.is_moe, hybrid=spec.is_hybrid, quantized=quantized),
        prefix_caching=s.enable_prefix_caching, kv_budget=s.kv_cache_memory_bytes, compile_cache=compile_cache,
    )


def context(deployment: Deployment, src: SpecSource, release: rules.VersionRules,
            compile_cache: str = "cold") -> Context:
    """Check the layout as vLLM would, place the ranks and resolve the settings."""
    par = deployment.recipe.parallel
    _check_version(src.spec, release)
    kvspecs.check_kv_dtype(deployment.recipe.serve.kv_cache_dtype, release.version)
    layout.check_parallel(src.spec, par.tp, par.pp, par.dcp)
    profiles = node_profiles(deployment)
    if src.spec.vision is not None and not encoder.tower_built(deployment.recipe.serve.multimodal):
        src = src.model_copy(update={"spec": src.spec.model_copy(update={"vision": None})})
    place = layout.placement(par.tp, par.pp, len(deployment.nodes),
                             [p.gpus if p.kind == "cuda" else None for p in profiles], dp=par.dp)
    ctx = Context(deployment, src, release, profiles, place,
                  settings(deployment, src.spec, profiles, release, compile_cache))
    quant_rules.check(src.spec, quant_rules.scheme_for(ctx), quant_rules.setup_for(ctx))  # will it start
    return ctx
