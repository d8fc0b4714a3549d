"""Wrap a rank's vLLM argv in ``docker run``: host network and IPC, GPU flags, model/cache mounts,
the container named and labelled with the run id. The vLLM argv inside is the same as for a venv."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from forklift.recipe.schema import DockerRuntime

LAUNCHER_IN_CONTAINER = "/opt/forklift/vllm_main.py"
LABEL_RUN_ID = "forklift.run_id"
LABEL_RANK = "forklift.rank"
LABEL_ROLE = "forklift.role"


def container_name(run_id: str, rank: int, role: str = "engine") -> str:
    suffix = f"rank{rank}" if role == "engine" else f"{role}{rank}"
    return f"forklift-{run_id}-{suffix}"


def docker_argv(
    rt: DockerRuntime,
    inner: Sequence[str],
    *,
    name: str,
    run_id: str,
    rank: int,
    role: str,
    env: Mapping[str, str],
    secret_names: Sequence[str],
    mounts: Sequence[str],
) -> list[str]:
    """``docker run`` in the foreground (the spawned client's pid is the rank's pid; logs go to the log). The
    restart policy is "no", said explicitly: forklift's supervisor owns restarts (a daemon-side policy would restart
    one rank out of the deployment's start order)."""
    argv = [
        "docker", "run", "--rm", "--restart", "no", "--name", name,
        "--label", f"{LABEL_RUN_ID}={run_id}", "--label", f"{LABEL_RANK}={rank}", "--label", f"{LABEL_ROLE}={role}",
        "--network", "host", "--ipc", "host",
    ]
    if rt.gpus:
        argv += ["--gpus", rt.gpus]
    for m in mounts:
        argv += ["-v", m]
    for k, v in env.items():
        argv += ["-e", f"{k}={v}"]
    for k in secret_names:
        argv += ["-e", k]  # value taken from the docker client's environment, never on the command line
    argv += rt.extra_docker_args
    return [*argv, rt.image, *inner]
