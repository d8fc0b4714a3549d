"""Run the gather program on nodes through their Runners: facts per node, routes and timed TCP connects per pair.

One program run per node per step, all nodes in parallel (``fan_out``); the program is sent on stdin and prints
one JSON object, parsed here by ``forklift.net.parse``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from forklift.errors import ForkliftError, RunnerError
from forklift.launch.render import python_for
from forklift.net import parse
from forklift.net.topology import NodeNet, Route
from forklift.recipe.schema import DockerRuntime, Recipe
from forklift.runner import Runner, fan_out

GATHER_TIMEOUT_S = 90.0
"""Importing torch for the NCCL probe takes seconds on a GPU node; sysfs and tools take well under one."""


def program_source() -> str:
    return (resources.files("forklift.net") / "gather_program.py").read_text()


def run_program(runner: Runner, python: str, args: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
                timeout: float = GATHER_TIMEOUT_S) -> dict[str, Any]:
    """The gather program's JSON from one node (RunnerError naming the host when it fails)."""
    res = runner.run([python, "-", json.dumps(dict(args))], input=program_source(), env=dict(env or {}) or None,
                     timeout=timeout)
    lines = res.stdout.strip().splitlines()
    if res.returncode != 0 or not lines:
        raise RunnerError(f"{runner.host}: the network probe failed under {python} (exit {res.returncode}): "
                          f"{res.stderr.strip()[-300:] or 'no output'}",
                          fix=f"Check that `{python}` runs on {runner.host} (Python 3.9 or later).")
    try:
        data: dict[str, Any] = json.loads(lines[-1])
    except ValueError as exc:
        raise RunnerError(f"{runner.host}: the network probe printed no JSON: {lines[-1][:200]}") from exc
    return data


def host_python(recipe: Recipe) -> str:
    """The Python that runs the gather program on a node: the recipe's (venv), else the host's python3."""
    return "python3" if isinstance(recipe.runtime, DockerRuntime) else python_for(recipe)


def node_env(recipe: Recipe, index: int) -> dict[str, str]:
    """The variables vLLM's ranks get on that node that change which NCCL loads (LD_*, VLLM_NCCL_SO_PATH)."""
    env = {**recipe.env, **recipe.nodes[index].env}
    return {k: v for k, v in env.items() if k.startswith("LD_") or k in ("VLLM_NCCL_SO_PATH", "PATH")}


def _docker_nccl(runner: Runner, recipe: Recipe, index: int) -> dict[str, Any]:
    rt = recipe.runtime
    assert isinstance(rt, DockerRuntime)
    mounts = [a for m in rt.mounts if m.host.startswith("/")
              for a in ("-v", f"{m.host}:{m.container}" + (":ro" if m.read_only else ""))]
    env = [a for k, v in node_env(recipe, index).items() for a in ("-e", f"{k}={v}")]
    argv = ["docker", "run", "--rm", "-i", *mounts, *env, "--entrypoint", rt.python, rt.image, "-",
            json.dumps({"facts": False, "nccl": True})]
    res = runner.run(argv, input=program_source(), timeout=GATHER_TIMEOUT_S)
    lines = res.stdout.strip().splitlines()
    try:
        out: dict[str, Any] = json.loads(lines[-1])["nccl"]
        return out
    except (ValueError, IndexError, KeyError):
        return {"status": "error", "how": f"in {rt.image}",
                "error": f"`{shlex.join(argv[:6])} ...` exited {res.returncode}: {res.stderr.strip()[-200:]}"}


def _one_node(recipe: Recipe, index: int, runner: Runner) -> NodeNet:
    docker = isinstance(recipe.runtime, DockerRuntime)
    raw = run_program(runner, host_python(recipe), {"nccl": not docker}, env=node_env(recipe, index))
    if docker:
        raw["nccl"] = _docker_nccl(runner, recipe, index)
    return parse.node(recipe.nodes[index].host, raw)


def facts(recipe: Recipe, runners: Mapping[int, Runner]) -> tuple[dict[str, NodeNet], dict[str, ForkliftError]]:
    """Every node's facts, gathered in parallel; nodes that could not be reached are in the second dict."""
    done = fan_out(((i, i) for i in runners), lambda i: _one_node(recipe, i, runners[i]))
    hosts = [n.host for n in recipe.nodes]
    errors = {hosts[i]: exc if isinstance(exc, ForkliftError) else RunnerError(f"{hosts[i]}: {exc}")
              for i, exc in done.errors.items()}
    return {hosts[i]: done.results[i] for i in sorted(done.results)}, errors


def routes(recipe: Recipe, runners: Mapping[int, Runner], targets: Mapping[str, Sequence[str]]) -> list[Route]:
    """``ip -j route get`` from every node to every address of every other node in ``targets`` (host -> ips)."""
    hosts = [n.host for n in recipe.nodes]

    def one(i: int) -> list[Route]:
        wanted = [(peer, ip) for peer, ips in targets.items() if peer != hosts[i] for ip in ips]
        raw = run_program(runners[i], host_python(recipe), {"facts": False, "routes": sorted({ip for _, ip in wanted})})
        return [_route(hosts[i], peer, ip, raw.get("routes", {}).get(ip, {})) for peer, ip in wanted]

    done = fan_out(((i, i) for i in runners), one)
    return [r for i in sorted(done.results) for r in done.results[i]]


def _route(src: str, dst: str, ip: str, cmd: Mapping[str, Any]) -> Route:
    if cmd.get("rc") != 0:
        return Route(src, dst, ip, error=(str(cmd.get("err", "")).strip() or "no route")[:200])
    try:
        got = parse.route_get(str(cmd.get("out", "")))
    except ValueError:
        return Route(src, dst, ip, error="unreadable `ip -j route get` output")
    if got.get("type") in ("unreachable", "prohibit", "blackhole"):
        return Route(src, dst, ip, error=f"route type {got['type']}")
    return Route(src, dst, ip, dev=got.get("dev"), gateway=got.get("gateway"), prefsrc=got.get("prefsrc"))
