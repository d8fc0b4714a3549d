"""Export a recipe as a Kubernetes LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) for users who outgrow
SSH-managed boxes: one group of ``len(nodes)`` pods, the leader is rank 0 (API server), workers run
``--headless`` with ``--node-rank $(LWS_WORKER_INDEX)``. Same vLLM flags as ``render``; no scheduler of ours.
"""

from __future__ import annotations

import re
from typing import Any

from forklift.errors import RecipeError
from forklift.launch.flags import engine_args, rank_env
from forklift.launch.render import model_paths
from forklift.plan.result import Decisions, Plan, Unplanned
from forklift.recipe.schema import DockerRuntime, Recipe

DEFAULT_IMAGE = "vllm/vllm-openai:latest"
LWS_API = "leaderworkerset.x-k8s.io/v1"


def k8s_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (name or "forklift")[:50].rstrip("-")


def _literal(text: str) -> str:
    """Text Kubernetes passes on as written: every ``$`` doubled (``$$`` is its escape, so ``$(VAR)`` and an
    already doubled ``$$(VAR)`` both arrive as typed)."""
    return text.replace("$", "$$")


def _container(recipe: Recipe, decisions: Decisions, image: str, model_path: str, *, leader: bool) -> dict[str, Any]:
    nnodes = len(recipe.nodes)
    # without the leading "serve"; Kubernetes expands $(VAR) in args and env values (a served name or an extra arg
    # of "$(VLLM_API_KEY)" would hand the key to vLLM's argv and log): the recipe's own text is escaped, forklift's
    # own references to the LeaderWorkerSet's variables (added below) are not
    args = [_literal(a) for a in engine_args(recipe, decisions, model_path)[1:]]
    if nnodes > 1:
        if recipe.parallel.backend == "ray":
            args += ["--distributed-executor-backend", "ray"]
        else:
            args += ["--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "0" if leader else "$(LWS_WORKER_INDEX)",
                     "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port", str(recipe.network.master_port)]
    if leader:
        args += ["--host", "0.0.0.0", "--port", str(recipe.serve.port)]  # noqa: S104 - inside the pod
    else:
        args.append("--headless")
    env: list[dict[str, Any]] = [{"name": k, "value": _literal(v)}
                                 for k, v in sorted(rank_env(recipe, decisions).items())]
    if recipe.serve.api_key_env and leader:
        env.append({"name": "VLLM_API_KEY",
                    "valueFrom": {"secretKeyRef": {"name": k8s_name(recipe.name or "forklift") + "-api-key",
                                                   "key": "key"}}})
    container: dict[str, Any] = {
        "name": "vllm-leader" if leader else "vllm-worker",
        "image": image,
        "command": ["vllm", "serve"],
        "args": args,
        "env": env,
        "volumeMounts": [{"name": "model", "mountPath": model_path, "readOnly": True},
                         {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    gpus = recipe.parallel.tp * recipe.parallel.pp * recipe.parallel.dp // max(1, nnodes)
    if recipe.head.hardware != "cpu":
        container["resources"] = {"limits": {"nvidia.com/gpu": max(1, gpus)}}
    if leader:
        container["ports"] = [{"containerPort": recipe.serve.port, "name": "http"}]
        container["readinessProbe"] = {"httpGet": {"path": "/health", "port": recipe.serve.port},
                                       "initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 360}
    return container


def _pod(recipe: Recipe, decisions: Decisions, image: str, model_path: str, *, leader: bool) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app.kubernetes.io/name": k8s_name(recipe.name or "forklift"),
                                "forklift/role": "leader" if leader else "worker"}},
        "spec": {
            "containers": [_container(recipe, decisions, image, model_path, leader=leader)],
            "volumes": [{"name": "model", "hostPath": {"path": model_path, "type": "Directory"}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        },
    }


def leader_worker_set(plan: Plan | Unplanned, *, image: str | None = None) -> dict[str, Any]:
    """The LeaderWorkerSet manifest (a plain dict; dump it as YAML or JSON). The model is a hostPath volume
    mounted at the same path in the pod, so it must be an absolute path on the nodes."""
    recipe = plan.deployment.recipe
    host_path, _ = model_paths(recipe, 0, "~")
    if host_path is None or not host_path.startswith("/"):
        where = host_path or recipe.model.source
        raise RecipeError(f"--format k8s needs the model at an absolute path on the nodes, not {where!r}",
                          fix="Set model.path to an absolute path, e.g. --set model.path=/models/NAME.")
    model_path = host_path
    rt = recipe.runtime
    image = image or (rt.image if isinstance(rt, DockerRuntime) else DEFAULT_IMAGE)
    name = k8s_name(recipe.name or "forklift")
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "forklift"}},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": len(recipe.nodes),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod(recipe, plan.decisions, image, model_path, leader=True),
                "workerTemplate": _pod(recipe, plan.decisions, image, model_path, leader=False),
            },
        },
    }
