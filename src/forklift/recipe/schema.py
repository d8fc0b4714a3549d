"""The recipe: what the user wants deployed. Pure data, pydantic v2, unknown keys are errors.

Every knob that changes memory or speed is a typed field; ``serve.extra_args`` is the escape hatch
that ``plan`` warns about.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from forklift.names import ENV_NAME, check_ssh_target
from forklift.recipe.speculative import Speculative

BUNDLED_PREFIX = "bundled:"
_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}")


def is_hub_id(source: str) -> bool:
    """``org/name`` (one slash, not a path, not bundled): a Hugging Face id."""
    return (source.count("/") == 1 and not source.startswith((".", "/", "~", BUNDLED_PREFIX))
            and ":" not in source)


class Strict(BaseModel):
    """Base for every recipe section: unknown keys rejected, assignment validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _env_values_as_text(value: object) -> object:
    """Environment values are text; accept YAML numbers (CUDA_VISIBLE_DEVICES: 0) as their text."""
    if isinstance(value, dict):
        return {k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in value.items()}
    return value


def _env_names(value: dict[str, str]) -> dict[str, str]:
    """Names a shell and ``env`` read as names only; values that a process environment can hold."""
    for name, text in value.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name: use letters, digits and '_', "
                             "not starting with a digit (e.g. NCCL_DEBUG)")
        if "\0" in text:
            raise ValueError(f"the value of {name} holds a NUL byte, which no environment can carry")
    return value


EnvMap = Annotated[dict[str, str], BeforeValidator(_env_values_as_text), AfterValidator(_env_names)]


class Capabilities(Strict):
    """What the model itself can do, as the recipe's author knows it. ``check`` skips or warns (with this field as
    the reason) instead of failing a probe the model is too small for; a server fault still fails."""

    tools: bool = Field(
        default=True, description="Follows a tool's JSON schema under named or required tool choice (check: tools, "
        "and integrity's tool scenarios).",
    )
    exact_answers: bool = Field(
        default=True, description="Answers small arithmetic, a few well-known facts and a JSON-mode question "
        "exactly (check: integrity's exact-answer probes).",
    )
    multilingual: bool = Field(
        default=True, description="Writes Chinese, Korean and Russian text (check: integrity's U+FFFD probes in "
        "those scripts; Latin is always probed).",
    )
    long_generation: bool = Field(
        default=True, description="Writes a long greedy text without looping (check: integrity's repetition "
        "probe).",
    )


class ModelSection(Strict):
    """Which weights to serve."""

    source: str = Field(
        description="A local path, a Hugging Face id (org/name, read from the local HF cache), "
        "or 'bundled:NAME' for a model forklift ships."
    )
    served_name: str | None = Field(
        default=None, description="Name clients use in requests; default: the last part of source."
    )
    path: str | None = Field(
        default=None,
        description="Where the weights are on every node (a host path; '~' is that node's home). Default: "
        "model.source when it is a path; for a Hugging Face id, the node's Hugging Face cache (vLLM reads it "
        "offline there). A node's own `model_path` wins over this.",
    )
    revision: str | None = Field(default=None, description="Hugging Face revision, for hub ids.")
    tokenizer: str | None = Field(default=None, description="Tokenizer path/id if not beside the weights.")
    load_format: Literal["auto", "safetensors", "dummy", "gguf"] = Field(
        default="auto", description="'dummy' loads random weights from config.json alone (testing, sizing)."
    )
    trust_remote_code: bool = False
    config: str | None = Field(
        default=None, description="For planning: a bundled config name (`forklift plan --list-configs`) or a "
        "path to config.json, when the weights are not on this machine.",
    )
    capabilities: Capabilities = Field(
        default_factory=Capabilities, description="What the model can do (default: everything `check` probes); "
        "`check` skips or warns, naming this field, where it is false.",
    )

    @field_validator("source")
    @classmethod
    def _source_not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @property
    def is_bundled(self) -> bool:
        return self.source.startswith(BUNDLED_PREFIX)

    @property
    def is_hub_id(self) -> bool:
        """``org/name`` that is not a path: vLLM resolves it from the node's Hugging Face cache."""
        return is_hub_id(self.source)

    @property
    def bundled_name(self) -> str:
        return self.source[len(BUNDLED_PREFIX) :]

    def default_served_name(self) -> str:
        if self.served_name:
            return self.served_name
        tail = self.source.rstrip("/").split("/")[-1]
        return tail.split(":")[-1]


class VenvRuntime(Strict):
    """vLLM installed in a Python environment on each node."""

    kind: Literal["venv"] = "venv"
    python: str | None = Field(
        default=None, description="Python interpreter with vLLM; default: the one running forklift."
    )


def _mount_from_text(value: object) -> object:
    """``HOST:CONTAINER[:ro|:rw]`` -> {host, container, read_only}."""
    if not isinstance(value, str):
        return value
    parts = value.split(":")
    if len(parts) == 3 and parts[2] in ("ro", "rw"):
        return {"host": parts[0], "container": parts[1], "read_only": parts[2] == "ro"}
    if len(parts) == 2:
        return {"host": parts[0], "container": parts[1], "read_only": False}
    raise ValueError(f"{value!r}: expected HOST:CONTAINER or HOST:CONTAINER:ro")


def _mount_path(path: str) -> str:
    """``docker run -v`` splits its value at ':' (SRC:DST:OPTIONS): a ':' in a path would add a mount or options."""
    if ":" in path or any(c in path for c in "\0\n\r"):
        raise ValueError(f"{path!r}: a mount path cannot hold ':' or control characters (docker -v splits at ':')")
    return path


class Mount(Strict):
    """One bind mount of a host path into the container (`docker run -v`)."""

    host: str = Field(description="Path on the node; '~' is the node's home (expanded by forklift, not docker).")
    container: str = Field(description="Absolute path inside the container.")
    read_only: bool = True

    @field_validator("host")
    @classmethod
    def _host_path(cls, v: str) -> str:
        if not v.startswith(("/", "~")):
            raise ValueError(f"{v!r}: a host path must be absolute or start with '~' (a bare name is a docker volume)")
        return _mount_path(v)

    @field_validator("container")
    @classmethod
    def _container_path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{v!r}: the container path must be absolute")
        return _mount_path(v)


class DockerRuntime(Strict):
    """vLLM inside a container on each node."""

    kind: Literal["docker"] = "docker"
    image: str = Field(description="Image with vLLM installed.")
    gpus: str | None = Field(default="all", description="Value for `docker run --gpus`; null for CPU.")
    container_model_path: str | None = Field(
        default=None,
        description="Where the model directory appears inside the container (forklift mounts the node's model "
        "path there, read-only). Default: the same path as on the node.",
    )
    mounts: list[Annotated[Mount, BeforeValidator(_mount_from_text)]] = Field(
        default_factory=list, description="Extra bind mounts: {host, container, read_only} or 'HOST:CONTAINER[:ro]'."
    )
    extra_docker_args: list[str] = Field(
        default_factory=list, description="More `docker run` arguments. A restart policy (--restart) is refused: "
        "forklift's supervisor owns restarts, since per-container restarts break a multi-node start order.",
    )
    python: str = "python3"

    @field_validator("extra_docker_args")
    @classmethod
    def _no_restart_policy(cls, v: list[str]) -> list[str]:
        if any(a == "--restart" or a.startswith("--restart=") for a in v):
            raise ValueError("a container restart policy (--restart) restarts one rank out of the deployment's "
                             "start order; drop it and use the recipe's `supervise:` section "
                             "(`forklift up --supervise`)")
        return v


Runtime = Annotated[VenvRuntime | DockerRuntime, Field(discriminator="kind")]


class Node(Strict):
    """One host of the deployment."""

    host: str = Field(default="localhost", description="Name in forklift's output; 'localhost' runs locally.")
    ssh: str | None = Field(
        default=None, description="SSH target user@host[:port]; the user's ~/.ssh/config applies."
    )
    hardware: str = Field(default="cpu", description="Hardware profile name (see `forklift hw --list`).")
    data_ip: str | None = Field(default=None, description="Address other ranks reach this node on.")
    model_path: str | None = Field(
        default=None, description="Where the weights are on this node, when it differs from model.path (host path)."
    )
    env: EnvMap = Field(
        default_factory=dict,
        description="Environment for this node's ranks only, over the recipe's env "
        "(e.g. CUDA_VISIBLE_DEVICES when two 'nodes' share one host).",
    )
    nccl_socket_ifname: str | None = Field(
        default=None, description="NCCL_SOCKET_IFNAME for this node's ranks, over network.nccl_socket_ifname "
        "(interface names differ per node; `forklift net apply` writes it).",
    )
    gloo_socket_ifname: str | None = Field(default=None, description="GLOO_SOCKET_IFNAME for this node's ranks.")
    nccl_ib_hca: str | None = Field(
        default=None, description="NCCL_IB_HCA for this node: the RDMA devices of the port that reaches the peers "
        "(cabling may use another port per node).",
    )
    nccl_ib_gid_index: int | None = Field(
        default=None, ge=0, description="NCCL_IB_GID_INDEX for this node. Leave unset: NCCL >= 2.21.5 picks the "
        "RoCE v2 IPv4 entry per HCA itself; `forklift net check` shows the index.",
    )

    @field_validator("host")
    @classmethod
    def _host_name(cls, v: str) -> str:
        if not v or not _HOST_RE.fullmatch(v):
            raise ValueError("must be a host name (letters, digits, '.', '_', '-'), e.g. spark-a")
        return v

    @field_validator("ssh")
    @classmethod
    def _ssh_target(cls, v: str | None) -> str | None:
        if v is not None:
            check_ssh_target(v)
        return v

    @field_validator("data_ip")
    @classmethod
    def _data_ip(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ipaddress.ip_address(v)
            except ValueError:
                raise ValueError("must be an IP address (the node's address on the data network, e.g. "
                                 "10.0.0.2); `forklift net check` finds it") from None
        return v

    @property
    def is_local(self) -> bool:
        return self.ssh is None and self.host in ("localhost", "127.0.0.1", "::1")


class Parallel(Strict):
    """How the model is split."""

    tp: int = Field(default=1, ge=1, description="Tensor parallel size (GPUs per node sharing each layer).")
    pp: int = Field(default=1, ge=1, description="Pipeline parallel size (stages, usually one per node).")
    dp: int = Field(default=1, ge=1, description="Data parallel replicas.")
    dcp: int = Field(default=1, ge=1, description="Decode context parallel size (splits stored KV tokens).")
    backend: Literal["native", "ray"] = Field(
        default="native", description="Multi-node executor: vLLM's native (--nnodes) or Ray."
    )
    pp_layer_partition: list[int] | None = Field(
        default=None, description="VLLM_PP_LAYER_PARTITION: layers per stage, must sum to the layer count."
    )

    @model_validator(mode="after")
    def _partition_matches_pp(self) -> Parallel:
        if self.pp_layer_partition is not None and len(self.pp_layer_partition) != self.pp:
            raise ValueError(
                f"pp_layer_partition has {len(self.pp_layer_partition)} entries but pp is {self.pp}"
            )
        return self


# Every --kv-cache-dtype stock vLLM 0.23-0.33 accepts (config/cache.py CacheDType); which release takes which name,
# and the bytes each stores, are the planner's data (plan/data/vllm.yaml kv_cache_dtypes).
KvCacheDtype = Literal[
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3",
    "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head",
    "nvfp4", "nvfp4_4over6",
]
Quantization = Literal[
    "fp8", "modelopt_fp4", "nvfp4", "mxfp4", "awq", "awq_marlin", "gptq", "gptq_marlin",
    "compressed-tensors", "bitsandbytes", "gguf",
]


class Multimodal(Strict):
    """The multimodal knobs that change memory (vLLM's MultiModalConfig). Null means vLLM's own default."""

    limit_mm_per_prompt: dict[str, Annotated[int, Field(ge=0)]] | None = Field(
        default=None, description="--limit-mm-per-prompt, items per modality (image, video, audio). Every modality "
        "of a tower at 0 skips building that tower (no weights, no encoder profiling).",
    )
    skip_mm_profiling: bool = Field(
        default=False, description="--skip-mm-profiling: the profile run skips the encoder on dummy items, so the "
        "KV pool is sized without the encoder's peak (a real image batch can then run out of memory).",
    )
    mm_encoder_tp_mode: Literal["weights", "data"] = Field(
        default="weights", description="--mm-encoder-tp-mode: 'weights' shards the tower over TP; 'data' keeps a "
        "whole tower on every TP rank and splits the batch.",
    )
    max_pixels: int | None = Field(
        default=None, ge=1, description="--mm-processor-kwargs max_pixels: the image processor's largest image, "
        "which sets the tokens per dummy item vLLM profiles the encoder with.",
    )


class Serve(Strict):
    """vLLM serving knobs. Null means vLLM's own default."""

    host: str = Field(default="127.0.0.1", description="Address the API server binds on the head node.")
    port: int = Field(default=8000, ge=1, le=65535)
    max_model_len: int | None = Field(default=None, ge=16)
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    kv_cache_dtype: KvCacheDtype = "auto"
    quantization: Quantization | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    enforce_eager: bool = False
    block_size: int | None = Field(default=None, ge=1)
    disable_custom_all_reduce: bool = Field(
        default=False, description="NCCL all-reduce instead of vLLM's custom kernel (tensor parallel on GPUs)."
    )
    cpu_kv_cache_gib: float | None = Field(
        default=None, gt=0, description="vLLM-CPU's KV pool in GiB (VLLM_CPU_KVCACHE_SPACE)."
    )
    kv_cache_memory_bytes: Annotated[int, Field(ge=1)] | Literal["plan"] | None = Field(
        default=None,
        description="vLLM's explicit KV budget per GPU (--kv-cache-memory-bytes; skips profiling-based sizing): "
        "bytes, or \"plan\" for the pool the planner predicts. Rendered from the plan's decisions.",
    )
    enable_prefix_caching: bool | None = Field(
        default=None, description="--enable-prefix-caching / --no-enable-prefix-caching (null: vLLM's default; "
        "on hybrid models it changes the Mamba cache mode and the KV block size)."
    )
    enable_expert_parallel: bool = Field(
        default=False, description="--enable-expert-parallel: whole experts per rank over tp x dp (DP+EP)."
    )
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = False
    speculative: Speculative | None = Field(
        default=None, description="Speculative decoding (--speculative-config), typed per method: ngram, ngram_gpu, "
        "suffix, draft_model, eagle, eagle3, mtp, dflash, dspark, medusa.",
    )
    multimodal: Multimodal = Field(
        default_factory=Multimodal, description="Multimodal towers: items per prompt, encoder profiling, tower TP."
    )
    api_key_env: str | None = Field(
        default=None, description="Name of an environment variable holding the API key (never the key)."
    )
    seed: int | None = None
    extra_args: list[str] = Field(
        default_factory=list, description="Escape hatch: raw vLLM arguments. `plan` warns about these."
    )

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("must be an environment variable name such as FORKLIFT_API_KEY, not the key")
        return v

    @model_validator(mode="after")
    def _tool_choice_needs_parser(self) -> Serve:
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError("enable_auto_tool_choice needs tool_call_parser (for example 'hermes')")
        return self


class Network(Strict):
    """Data-plane settings for multi-node deployments (NCCL / Gloo)."""

    master_port: int = Field(default=29500, ge=1, le=65535)
    nccl_socket_ifname: str | None = None
    gloo_socket_ifname: str | None = None
    nccl_ib_disable: bool | None = None
    nccl_ib_hca: str | None = None
    nccl_net_gdr_level: int | None = Field(default=None, ge=0)
    nccl_debug: Literal["WARN", "INFO", "TRACE"] | None = None
    profile: str = Field(default="ethernet-200g", description="Network profile for the planner's hop cost.")


class Ray(Strict):
    """Ray backend settings (only used with parallel.backend: ray); seed 002's timeouts."""

    port: int = Field(default=6379, ge=1, le=65535)
    health_check_failure_threshold: int | None = Field(default=600, ge=1)
    cgraph_get_timeout_s: int | None = Field(default=3600, ge=1)
    start_timeout_s: float = Field(default=120.0, gt=0)
    drain_timeout_s: float = Field(
        default=0.0, ge=0,
        description="Ray's drain on SIGTERM (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S; Ray's own default is 30 s, "
        "which outlasts `down`'s grace). forklift stops the engine before Ray, so there is nothing to drain.",
    )


class Timeouts(Strict):
    """How long forklift waits."""

    ready_s: float = Field(default=1800.0, gt=0, description="Startup until the first token.")
    stop_s: float = Field(default=30.0, gt=0, description="SIGTERM grace before SIGKILL in `down`.")
    join_s: float = Field(default=600.0, gt=0, description="Multi-node: until every rank has joined the head.")
    ssh_s: float = Field(default=60.0, gt=0, description="Per-host limit for one remote command.")


class Supervise(Strict):
    """What the supervisor (`forklift up --supervise`, `forklift supervise NAME`) does once the run serves: probe,
    and on a dead rank, a failed probe or a hung engine stop the whole deployment and start it again from its run
    record, with backoff and a cap."""

    interval_s: float = Field(default=15.0, gt=0, description="Seconds between probes (/health, every rank's pid, "
                              "one streamed token).")
    token_timeout_s: float = Field(default=60.0, gt=0, description="A healthy server that streams no token within "
                                   "this is hung.")
    max_restarts: int = Field(default=3, ge=0, description="At most this many restarts within `window_s`; one more "
                              "failure gives up (loudly: hook, record, exit 1).")
    window_s: float = Field(default=3600.0, gt=0, description="The window `max_restarts` counts in.")
    backoff_s: float = Field(default=10.0, ge=0, description="Wait before the first restart in the window; doubled "
                             "for each further one.")
    backoff_max_s: float = Field(default=300.0, ge=0, description="The longest wait between restarts.")
    memory_check: Literal["auto", "always", "never"] = Field(
        default="auto", description="Before a restart, wait until each node's MemAvailable is back within "
        "`memory_margin_gib` of what it was before the start, else refuse to restart. auto: unified-memory nodes "
        "only (GB10, CPU: host memory is the engine's; a discrete GPU's memory is `down`'s own check).",
    )
    memory_margin_gib: float = Field(default=2.0, ge=0, description="How far below its pre-start MemAvailable a "
                                     "node may stay and still count as released.")
    memory_wait_s: float = Field(default=60.0, ge=0, description="How long to wait for memory to come back.")
    where: Literal["head", "here"] = Field(
        default="head", description="Where `up --supervise` runs the supervisor. head: on node 0 (over SSH when "
        "node 0 is remote: forklift must be installed there; the record is copied into its forklift home, and "
        "`status` / `down` here read and stop it over SSH), so a control machine that sleeps does not stop it. "
        "here: on this machine.",
    )
    forklift: list[str] | None = Field(
        default=None, description="The argv that runs forklift on a remote head (default: the venv runtime's "
        "python with `-m forklift.cli.main`, else `forklift` on the head's PATH).",
    )
    on_event: list[str] | str | None = Field(
        default=None, description="Called on restart, give-up and recovery: an argv list (the event as JSON on "
        "stdin, its kind in $FORKLIFT_EVENT) or an http(s) URL (the event POSTed as JSON).",
    )

    @field_validator("forklift")
    @classmethod
    def _forklift(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not v[0].strip()):
            raise ValueError("give the argv that runs forklift on the head, e.g. ['/opt/forklift/bin/forklift']")
        return v

    @field_validator("on_event")
    @classmethod
    def _hook(cls, v: list[str] | str | None) -> list[str] | str | None:
        if isinstance(v, str) and not re.match(r"^https?://\S+$", v):
            raise ValueError(f"{v!r}: give an http(s) URL, or a command as an argv list (['notify-send', 'x'])")
        if isinstance(v, list) and (not v or not v[0].strip()):
            raise ValueError("the command's argv list must name a program")
        return v

    @model_validator(mode="after")
    def _backoff_order(self) -> Supervise:
        if self.backoff_max_s < self.backoff_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s}) is below backoff_s ({self.backoff_s})")
        return self


# --- forklift-patches: typed recipe patch entries (owned by the patches helper) -----------------------


def _patch_entry_from_text(value: object) -> object:
    """``kv-scale-loader-args`` -> {id: kv-scale-loader-args}."""
    return {"id": value} if isinstance(value, str) else value


class PatchRef(Strict):
    """One recipe patch: a catalog id, optionally allowed outside the patch's vLLM range (say why)."""

    id: str = Field(min_length=1, description="A patch id from `forklift patch list` (or a path to a patch file).")
    any_version: bool = Field(
        default=False, description="Apply even when the vLLM version is outside the patch's range (a nightly or a "
        "fork build); `because` is required.",
    )
    because: str | None = Field(default=None, description="Why the patch fits this vLLM although its range does "
                                "not say so, e.g. 'nightly 0.1.dev16581 carries the same code'.")

    @model_validator(mode="after")
    def _because_with_any_version(self) -> PatchRef:
        if self.any_version and not (self.because or "").strip():
            raise ValueError(f"patch {self.id!r}: any_version needs `because` (why this vLLM carries the same code)")
        if self.because is not None and not self.any_version:
            raise ValueError(f"patch {self.id!r}: `because` explains any_version; set any_version: true or drop it")
        return self

    @model_serializer(mode="wrap")
    def _plain_id(self, handler: SerializerFunctionWrapHandler) -> object:
        return self.id if not self.any_version else handler(self)


PatchEntry = Annotated[PatchRef, BeforeValidator(_patch_entry_from_text)]

# --- end forklift-patches ------------------------------------------------------------------------------


class Recipe(Strict):
    """A deployment: model, nodes, parallelism, serving knobs, patches, env."""

    name: str | None = Field(default=None, description="Recipe name (filled from the file name).")
    description: str | None = None
    extends: str | None = Field(default=None, description="Another recipe (name or path) this one overrides.")
    model: ModelSection
    runtime: Runtime = Field(default_factory=VenvRuntime)
    nodes: list[Node] = Field(default_factory=lambda: [Node()], min_length=1)
    cluster: str | None = Field(
        default=None, description="A named cluster file (name under $FORKLIFT_HOME/clusters/ or a path) "
        "whose nodes (and network) replace this recipe's.",
    )
    parallel: Parallel = Field(default_factory=Parallel)
    serve: Serve = Field(default_factory=Serve)
    network: Network = Field(default_factory=Network)
    ray: Ray = Field(default_factory=Ray)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    supervise: Supervise = Field(default_factory=Supervise, description="The supervisor's probes, restarts, "
                                 "backoff, memory gate and event hook (used with `up --supervise`).")
    env: EnvMap = Field(default_factory=dict, description="Extra environment for every rank.")
    patches: list[PatchEntry] = Field(  # forklift-patches: an id, or {id, any_version, because}
        default_factory=list, description="Patches applied before vLLM starts: ids from `forklift patch list`, or "
        "{id: ID, any_version: true, because: WHY} to apply one outside its vLLM range.",
    )

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def patch_ids(self) -> list[str]:  # forklift-patches
        return [p.id for p in self.patches]

    @property
    def served_name(self) -> str:
        return self.model.default_served_name()
