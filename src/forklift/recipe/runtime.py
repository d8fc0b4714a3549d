"""The recipe's ``runtime:`` section: vLLM in a Python environment or in a container (``kind``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from forklift.names import has_control
from forklift.recipe.strict import OneLine, Strict


def _release(v: str | None) -> str | None:
    if v is not None and not re.fullmatch(r"\d+\.\d+(\.\d+)?([.+-][0-9A-Za-z.+-]*)?", v):
        raise ValueError(f"{v!r}: expected a vLLM release such as 0.32.0")
    return v


VllmRelease = Annotated[str | None, AfterValidator(_release), Field(
    default=None, description="The vLLM release this runtime serves (for example 0.32.0): `plan` applies that "
    "release's rules when no --vllm-version is given. Null: the release a probe of these nodes ran, else the "
    "planner's default release.",
)]


class VenvRuntime(Strict):
    """vLLM installed in a Python environment on each node."""

    kind: Literal["venv"] = "venv"
    vllm_version: VllmRelease = None
    python: OneLine | None = Field(
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
    image: OneLine = Field(description="Image with vLLM installed (a docker reference: no spaces, not '-...').")
    vllm_version: VllmRelease = None
    gpus: str | None = Field(default="all", description="Value for `docker run --gpus`; null for CPU.")
    container_model_path: OneLine | None = Field(
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
    python: OneLine = "python3"

    @field_validator("image")
    @classmethod
    def _image_reference(cls, v: str) -> str:
        return check_image(v)

    @field_validator("extra_docker_args")
    @classmethod
    def _no_restart_policy(cls, v: list[str]) -> list[str]:
        if any(a == "--restart" or a.startswith("--restart=") for a in v):
            raise ValueError("a container restart policy (--restart) restarts one rank out of the deployment's "
                             "start order; drop it and use the recipe's `supervise:` section "
                             "(`forklift up --supervise`)")
        return v


Runtime = Annotated[VenvRuntime | DockerRuntime, Field(discriminator="kind")]


def check_image(ref: str) -> str:
    """A docker image reference as one argv word: not empty, no spaces or control characters, not an option."""
    if not ref or ref.startswith("-") or has_control(ref) or any(c.isspace() for c in ref):
        raise ValueError(f"{ref!r}: not an image reference (no spaces, not starting with '-'; e.g. "
                         "vllm/vllm-openai:v0.32.0)")
    return ref
