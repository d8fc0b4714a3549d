"""Where and how the deployment runs across hosts: ``nodes:``, ``parallel:``, ``network:`` (NCCL / Gloo)
and ``ray:``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from forklift.names import check_ssh_target
from forklift.recipe.strict import EnvMap, OneLine, Strict

_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,252}")


class Node(Strict):
    """One host of the deployment."""

    host: str = Field(default="localhost", description="Name in forklift's output; 'localhost' runs locally.")
    ssh: str | None = Field(
        default=None, description="SSH target user@host[:port]; the user's ~/.ssh/config applies."
    )
    hardware: str = Field(default="cpu", description="Hardware profile name (see `forklift hw --list`).")
    data_ip: str | None = Field(default=None, description="Address other ranks reach this node on.")
    model_path: OneLine | None = Field(
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


MAX_PARALLEL = 1024
"""The most ranks any parallel dimension takes (beyond it a plan would only spend time)."""


class Parallel(Strict):
    """How the model is split."""

    tp: int = Field(default=1, ge=1, le=MAX_PARALLEL,
                    description="Tensor parallel size (GPUs per node sharing each layer).")
    pp: int = Field(default=1, ge=1, le=MAX_PARALLEL,
                    description="Pipeline parallel size (stages, usually one per node).")
    dp: int = Field(default=1, ge=1, le=MAX_PARALLEL, description="Data parallel replicas.")
    dcp: int = Field(default=1, ge=1, le=MAX_PARALLEL,
                     description="Decode context parallel size (splits stored KV tokens).")
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
