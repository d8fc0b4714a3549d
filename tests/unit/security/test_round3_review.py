"""What an attacker's review of round 3 found, each held: recipe text that would reach a systemd unit, an argv or a
docker command as something other than one value; rsync's remote path; a pid the kernel gave to another process;
a `down` racing an `up`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forklift import recipe as recipes
from forklift.cluster import down as cluster_down
from forklift.cluster.stop import _stop_one
from forklift.distribution.transfer import rsync_argv
from forklift.errors import RecipeError, RunError, ServiceError
from forklift.host import procs
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RankState, RunLock, RunRecord, validate_name
from forklift.runner import LocalRunner
from forklift.supervise.service import render_unit
from tests.helpers import launch_of

pytestmark = pytest.mark.unit


def _recipe_file(tmp_path: Path, section: str, key: str, value: str, extra: str = "") -> Path:
    """The bundled default with one value set in a recipe file (JSON-quoted, so a newline stays a newline)."""
    path = tmp_path / "r.yaml"
    body = {"model": "model: {source: \"bundled:smollm2-135m-instruct\", %s}",
            "serve": "model: {source: \"bundled:smollm2-135m-instruct\"}\nserve: {%s}",
            "runtime": "model: {source: \"bundled:smollm2-135m-instruct\"}\nruntime: {%s}"}[section]
    path.write_text(body % f"{extra}{key}: {json.dumps(value)}" + "\n")
    return path


@pytest.mark.parametrize(("section", "key", "value"), [
    ("model", "served_name", "smol\n[Service]\nExecStartPre=+/bin/sh -c id"),
    ("model", "served_name", "--trust-remote-code"),
    ("model", "path", "/models/m\nx"),
    ("serve", "host", "attacker.example/p?"),
    ("serve", "host", "a b"),
    ("serve", "host", "spark-a\n"),
    ("runtime", "python", "/usr/bin/python3\n"),
    ("runtime", "python", "-c"),
])
def test_recipe_text_that_would_leave_its_line_is_refused_naming_the_key(tmp_path: Path, section: str, key: str,
                                                                         value: str) -> None:
    with pytest.raises(RecipeError) as err:
        recipes.load(str(_recipe_file(tmp_path, section, key, value, "kind: venv, " if section == "runtime" else "")))
    assert re.search(rf"{section}\.(\w+\.)?{key}: ", str(err.value)), str(err.value)  # runtime.venv.python


@pytest.mark.parametrize("image", ["--privileged", "img --privileged", "img\n"])
def test_an_image_that_is_an_option_or_has_spaces_is_refused(tmp_path: Path, image: str) -> None:
    with pytest.raises(RecipeError) as err:
        recipes.load(str(_recipe_file(tmp_path, "runtime", "image", image, "kind: docker, gpus: null, ")))
    assert "runtime.docker.image: " in str(err.value)


def test_a_docker_reference_is_taken(tmp_path: Path) -> None:
    path = _recipe_file(tmp_path, "runtime", "image", "vllm/vllm-openai:v0.32.0", "kind: docker, gpus: null, ")
    assert recipes.load(str(path)).runtime.kind == "docker"


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::", "fe80::1%eth0", "spark-a", "spark-a.lan", "spark_a"])
def test_bind_addresses_and_host_names_are_taken(tmp_path: Path, host: str) -> None:
    assert recipes.load(str(_recipe_file(tmp_path, "serve", "host", host))).serve.host == host


def test_a_unit_line_with_a_newline_is_refused() -> None:
    kw: dict[str, Any] = {"argv": ["forklift", "supervise", "x"], "home": "/root/.forklift", "user": "root",
                          "environment": {}, "credentials": None, "stop_s": 30}
    with pytest.raises(ServiceError, match="control character"):
        render_unit("x", description="smol\n[Service]\nExecStartPre=+/bin/sh -c id", **kw)
    with pytest.raises(ServiceError, match="control character"):
        render_unit("x", **{**kw, "environment": {"PYTHONPATH": "/a\nExecStartPre=/bin/id"}})
    text = render_unit("x", description="100% up", **kw)
    assert "Description=forklift supervisor for run x (100%% up)" in text  # a specifier escaped


def test_rsync_hands_the_remote_path_over_as_data() -> None:
    argv = rsync_argv("/j/files", "/src", "node-b:/models/m;touch /tmp/x;", ssh=["ssh"], bwlimit_mb=None)
    assert "--protect-args" in argv
    assert argv[-1] == "node-b:/models/m;touch /tmp/x;/"


def test_run_names_end_where_they_end() -> None:
    with pytest.raises(Exception, match="name"):
        validate_name("evil\n")


def test_a_pid_another_process_has_now_is_not_ours_to_signal() -> None:
    runner = LocalRunner()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        started = procs.start_time(runner, proc.pid)
        assert started is not None
        assert not procs.recycled(runner, proc.pid, started)  # the process recorded: ours
        assert procs.recycled(runner, proc.pid, str(int(started) - 1))  # started at another time: someone else's
        assert not procs.recycled(runner, proc.pid, None)  # nothing recorded: as before
        rank = RankState(rank=0, host="localhost", pid=proc.pid, pgid=proc.pid, log_path="/dev/null",
                         started=str(int(started) - 1))
        assert _stop_one(rank, runner, 1.0) == "gone"
        assert proc.poll() is None  # never signalled
        assert _stop_one(rank.model_copy(update={"started": started}), runner, 5.0) == "terminated"
        assert proc.wait(timeout=10) is not None
    finally:
        if proc.poll() is None:
            proc.kill()


def test_down_is_refused_while_another_process_s_up_holds_the_run() -> None:
    record = RunRecord(name="racing", run_id="abc", plan=for_launch(resolve("default", []), force=True),
                       launch=launch_of("default", "/models/smol", run_id="abc"), endpoint="http://127.0.0.1:8000",
                       served_name="smollm2")
    record.save()
    code = ("import sys, time; from forklift.record import RunLock\n"
            "with RunLock('racing'):\n    print('held', flush=True); time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunError) as err:
            cluster_down.down(record)
        assert f"pid {holder.pid}" in str(err.value) and "forklift down racing" in (err.value.fix or "")
    finally:
        holder.kill()
        holder.wait()
    with RunLock("racing"):  # this process's own `up` (its failure path) may still stop what it started
        assert cluster_down.down(record).was_running is False


def test_the_root_guard_protects_only_processes_of_the_record_s_writer(tmp_path: Path) -> None:
    from forklift.node.guard import read_targets, serving_pids

    if os.getuid() != 0:
        pytest.skip("a record owned by another user needs root to write (the suite runs as root)")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        runs = tmp_path / "runs"
        for name, pgid, uid in (("forged", proc.pid, 65534), ("mine", proc.pid, os.getuid()), ("nopgid", None, 0)):
            (runs / name).mkdir(parents=True)
            record = runs / name / "record.json"
            record.write_text(json.dumps({"name": name, "status": "starting",
                                          "ranks": [{"rank": 0, "host": "localhost", "pid": proc.pid, "pgid": pgid}]}))
            if uid != os.getuid():
                os.chown(record, uid, -1)  # root: CI and the cluster tier run as root
        targets = {t.run: t for t in read_targets([str(runs)], {"localhost"})}
        assert targets["forged"].owner == 65534 and serving_pids(targets["forged"]) == []
        assert serving_pids(targets["nopgid"]) == []
        assert serving_pids(targets["mine"]) == [proc.pid]
    finally:
        proc.kill()
        proc.wait()


def test_the_plan_says_when_a_recipe_env_holds_what_looks_like_a_secret() -> None:
    from forklift.plan import make

    plan = make(recipes.load("default", ["env={HF_TOKEN: hf_x, NCCL_DEBUG: INFO, TOKENIZERS_PARALLELISM: 'false', "
                                         "VLLM_MAX_NUM_TOKENS: '8', VLLM_CPU_KVCACHE_SPACE: '1'}"]))
    said = [n for n in plan.notes if "like a secret" in n]
    assert len(said) == 1 and "HF_TOKEN" in said[0]
    assert not [w for w in ("NCCL_DEBUG", "KVCACHE", "TOKENIZERS", "NUM_TOKENS") if w in said[0]]
    assert not [n for n in make(recipes.load("default")).notes if "like a secret" in n]
