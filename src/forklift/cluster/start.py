"""Starting a Launch: each node's run folder and launcher, then the processes in order (Ray daemons, then the
engine workers in parallel, the head last), each recorded as soon as it exists so ``down`` can always clean up."""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from forklift.cluster.ready import check_alive, fail
from forklift.errors import ForkliftError
from forklift.host import procs, remote
from forklift.launch.launch_spec import Launch, NodePaths, RankLaunch
from forklift.launch.render import LAUNCHER_FILE, python_for
from forklift.patches.recipes import container_files
from forklift.recipe.schema import Recipe
from forklift.record import RankState, RunRecord, run_dir
from forklift.runner import FanOut, Runner, fan_out

EventFn = Callable[[str, str], None]
"""on_event(phase, detail): phase is one of PHASE_NAMES or 'preflight'/'prepare'."""
_RAY_NODE_RE = re.compile(r"^\s*(\d+)\s+node_[0-9a-f]+", re.M)


def _noop(phase: str, detail: str) -> None:
    return None


def reach_nodes(recipe: Recipe, name: str, run_id: str, runners: Mapping[int, Runner]) -> FanOut[int, NodePaths]:
    """Each node's home and this run's folder there (read-only: nothing is created yet); a node that cannot
    be reached is in ``errors`` with the reason."""
    def one(idx: int) -> NodePaths:
        if recipe.nodes[idx].is_local:
            return NodePaths(run_dir=str(run_dir(name)), home=str(Path.home()))
        home = remote.home_dir(runners[idx])
        return NodePaths(run_dir=f"{home}/.local/state/forklift/nodes/{name}-{run_id}", home=home)

    return fan_out(((i, i) for i in runners), one)


def node_paths(recipe: Recipe, name: str, run_id: str, runners: Mapping[int, Runner]) -> dict[int, NodePaths]:
    """``reach_nodes``, raising the first node's error."""
    done = reach_nodes(recipe, name, run_id, runners)
    done.raise_first()
    return done.results


def prepare_nodes(recipe: Recipe, name: str, paths: Mapping[int, NodePaths], runners: Mapping[int, Runner]) -> None:
    """Make the run folder on every node (removing this deployment's older ones); copy the vLLM launcher
    where forklift is not installed (remote nodes, containers)."""
    launcher = (Path(__file__).resolve().parent.parent / "engine" / "vllm_main.py").read_text()
    needs_launcher = recipe.runtime.kind == "docker" or python_for(recipe) != sys.executable
    patch_files = container_files(recipe)  # forklift-patches: docker only; the launcher applies them in the container

    def one(idx: int) -> None:
        node, runner, folder = recipe.nodes[idx], runners[idx], paths[idx].run_dir
        if node.is_local:
            Path(folder).mkdir(parents=True, exist_ok=True)
            rotate_logs(Path(folder))
        else:
            remote.remove_stale_run_dirs(runner, folder.rsplit("/", 1)[0], name, keep=folder)
        if needs_launcher or not node.is_local:
            remote.write_text(runner, f"{folder}/{LAUNCHER_FILE}", launcher)
        else:
            runner.run(["mkdir", "-p", folder]).check()
        for fname, text in patch_files.items():
            remote.write_text(runner, f"{folder}/{fname}", text)

    fan_out(((i, i) for i in runners), one).raise_first()


def rotate_logs(folder: Path) -> None:
    """Move the previous start's logs under ``previous/`` (replacing older ones): one log per run, so ``logs`` and
    ``doctor`` never read two starts as one."""
    logs = sorted(folder.glob("*.log"))
    if not logs:
        return
    previous = folder / "previous"
    shutil.rmtree(previous, ignore_errors=True)
    previous.mkdir()
    for log in logs:
        log.rename(previous / log.name)


def secret_values(secret_env: Mapping[str, str]) -> dict[str, str]:
    """{variable in the rank: its value}, read from this process's environment (never stored)."""
    env: dict[str, str] = {}
    for target, source in secret_env.items():
        value = os.environ.get(source)
        if value is None:
            raise ForkliftError(
                f"serve.api_key_env names {source}, but it is not set in this environment",
                fix=f"export {source}=... before `forklift up`, or remove serve.api_key_env.",
            )
        env[target] = value
    return env


def spawn_group(recipe: Recipe, group: Sequence[RankLaunch], record: RunRecord,
                runners: Mapping[int, Runner]) -> None:
    """Spawn a group of processes in parallel; record every one that started (even when this process is
    interrupted while they start: the pool finishes its spawns before the interrupt goes on), then raise the
    first error."""
    started: dict[int, RankState] = {}
    guard = threading.Lock()

    def one(item: tuple[int, RankLaunch]) -> None:
        i, rl = item
        log_path = f"{rl.run_dir}/{rl.log_name}"
        runner = runners[rl.node_index]
        spawned = runner.spawn(rl.argv, log_path=log_path, env=rl.env, secret_env=secret_values(rl.secret_env))
        with guard:
            started[i] = RankState(rank=rl.rank, host=rl.host, pid=spawned.pid, pgid=spawned.pid,
                                   container=rl.container, log_path=log_path, ssh=recipe.nodes[rl.node_index].ssh,
                                   node_index=rl.node_index, role=rl.role)
        try:  # after recording it: an interrupt here loses no rank
            when = procs.start_time(runner, spawned.pid)
        except ForkliftError:  # a flaky ssh round trip costs the pid check, never the start
            when = None
        with guard:
            started[i] = started[i].model_copy(update={"started": when})

    try:
        done = fan_out(((i, (i, rl)) for i, rl in enumerate(group)), one)
    finally:
        record.ranks.extend(started[i] for i in sorted(started))
        record.save()
    done.raise_first()


def ray_node_count(status_text: str) -> int:
    """Active nodes in `ray status` output."""
    active = status_text.split("Active:", 1)[-1].split("Pending:", 1)[0] if "Active:" in status_text else ""
    return sum(int(m.group(1)) for m in _RAY_NODE_RE.finditer(active))


def wait_ray_nodes(recipe: Recipe, launch: Launch, record: RunRecord, runners: Mapping[int, Runner],
                   on_event: EventFn) -> None:
    """Poll `ray status` on the head until every node is registered (never a fixed sleep)."""
    assert launch.ray_status_argv is not None
    want = len(recipe.nodes)
    deadline = time.monotonic() + recipe.ray.start_timeout_s
    seen = 0
    while time.monotonic() < deadline:
        check_alive(record, runners, "ray start")
        res = runners[0].run(launch.ray_status_argv, timeout=60)
        seen = ray_node_count(res.stdout) if res.ok else 0
        on_event("starting", f"ray: {seen}/{want} nodes registered")
        if seen >= want:
            return
        time.sleep(1.0)
    waiting = [r for r in record.ranks if r.role == "ray-worker"]
    rank = waiting[-1] if waiting else record.ranks[0]
    fail(record, rank, f"Ray registered {seen} of {want} nodes within {recipe.ray.start_timeout_s:.0f} s; "
         f"workers that may not have joined: {', '.join(r.host for r in waiting)}", runners)


def start_ray_cluster(recipe: Recipe, launch: Launch, record: RunRecord, runners: Mapping[int, Runner],
                      on_event: EventFn = _noop) -> None:
    """`ray start --head`, then every worker in parallel, then wait until `ray status` lists every node."""
    spawn_group(recipe, launch.ray[:1], record, runners)
    spawn_group(recipe, launch.ray[1:], record, runners)
    wait_ray_nodes(recipe, launch, record, runners, on_event)


def start_ranks(recipe: Recipe, launch: Launch, record: RunRecord, runners: Mapping[int, Runner],
                on_event: EventFn = _noop) -> None:
    """Start every process in order, saving the record after each group so `down` can always clean up:
    Ray head, Ray workers (then wait until all registered), engine workers, the head last."""
    if launch.ray:
        start_ray_cluster(recipe, launch, record, runners, on_event)
    workers = [r for r in launch.ranks if r.rank != 0]
    if workers:
        spawn_group(recipe, workers, record, runners)
    spawn_group(recipe, [launch.head], record, runners)
