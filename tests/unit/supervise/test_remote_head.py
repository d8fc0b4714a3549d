"""A supervisor on a remote head: the record as the head keeps it (node 0 local) and back, the head's answers
parsed, the errors when its forklift is missing or old, and status / down following its state through the head's
Runner (a FakeRunner answers the SSH side; the namespace cluster runs the real thing)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forklift.cluster.down import stop_supervisor, supervisor_state
from forklift.cluster.head import head_paths, mark_stopped, sync
from forklift.errors import RecipeError, RemoteHeadError, RunError
from forklift.plan import for_launch
from forklift.recipe import resolve
from forklift.record import RankState, RunRecord
from forklift.record import load as load_record
from forklift.record.head import LOCAL_HOST, for_head, from_head, state_for_head, state_from_head
from forklift.record.supervisor import HeadRef, SupervisorState, load_state, save_state
from forklift.runner import Completed
from forklift.runner.fake import FakeRunner
from forklift.supervise.remote import (
    bundle,
    failure,
    head_forklift,
    install_on_head,
    on_head,
    parse_receipt,
    receive,
    start_on_head,
)
from tests.helpers import launch_of

SECRET = "sk-remote-head-secret"
RECIPE = """
model: {{source: "bundled:smollm2-135m-instruct", served_name: smollm2}}
runtime: {{kind: venv, python: /opt/venv/bin/python}}
nodes:
  - {{host: node-a, ssh: root@10.237.0.1{head_ip}}}
  - {{host: node-b, ssh: root@10.237.0.2, data_ip: 10.237.0.2}}
parallel: {{pp: 2}}
serve: {{host: 0.0.0.0, port: 8000, max_model_len: 2048, cpu_kv_cache_gib: 1{key}}}
supervise: {{interval_s: 3{supervise}}}
"""


def _record(tmp_path: Path, *, head_ip: str = "", key: str = "", supervise: str = "") -> RunRecord:
    path = tmp_path / "pp2.yaml"
    path.write_text(RECIPE.format(head_ip=head_ip, key=key, supervise=supervise))
    deployment = resolve(str(path), [])
    launch = launch_of(deployment.recipe, "/models/smol", run_id="abc")
    ranks = [RankState(rank=0, host="node-a", pid=100, pgid=100, log_path="/root/n/rank0.log", ssh="root@10.237.0.1",
                       node_index=0),
             RankState(rank=1, host="node-b", pid=200, pgid=200, log_path="/root/n/rank1.log", ssh="root@10.237.0.2",
                       node_index=1)]
    return RunRecord(name="pp2", run_id="abc", status="ready", plan=for_launch(deployment, force=True),
                     launch=launch, ranks=ranks, endpoint="http://10.237.0.1:8000", served_name="smollm2",
                     ssh_config="/control/ssh_config", gpu_baseline_mib={"node-a": [10], "node-b": [20]})


def test_the_head_keeps_node_0_local_and_reaches_the_workers_as_written(tmp_path: Path) -> None:
    mine = _record(tmp_path)
    theirs = for_head(mine)
    head, worker = theirs.recipe.nodes
    assert head.is_local and head.host == LOCAL_HOST and head.ssh is None
    assert head.data_ip == "10.237.0.1"  # from its ssh target: the workers still reach the head where they did
    assert worker == mine.recipe.nodes[1]
    assert [(r.host, r.ssh) for r in theirs.ranks] == [(LOCAL_HOST, None), ("node-b", "root@10.237.0.2")]
    assert theirs.ssh_config is None  # the head's own ssh config, not this machine's path
    assert theirs.gpu_baseline_mib == {LOCAL_HOST: [10], "node-b": [20]}
    assert theirs.endpoint == mine.endpoint and theirs.run_id == mine.run_id
    assert not mine.recipe.head.is_local  # the caller's record is left as it was


def test_a_head_data_address_is_kept(tmp_path: Path) -> None:
    theirs = for_head(_record(tmp_path, head_ip=", data_ip: 10.9.0.1"))
    assert theirs.recipe.head.data_ip == "10.9.0.1"


def test_a_local_head_has_no_remote_copy(tmp_path: Path) -> None:
    mine = _record(tmp_path)
    local = for_head(mine)
    with pytest.raises(RunError, match="no remote head"):
        for_head(local)


def test_the_heads_record_comes_back_in_this_machines_view(tmp_path: Path) -> None:
    mine = _record(tmp_path)
    assert from_head(for_head(mine), mine).model_dump() == mine.model_dump()  # nothing lost either way
    # a restart on the head: new run id and pids, node 0's ranks local there, its endpoint as the head sees it
    restarted = for_head(mine).model_copy(update={
        "run_id": "def", "endpoint": "http://127.0.0.1:8000",
        "ranks": [RankState(rank=0, host=LOCAL_HOST, pid=300, pgid=300, log_path="/h/runs/pp2/rank0.log",
                            node_index=0),
                  RankState(rank=1, host="node-b", pid=400, pgid=400, log_path="/root/n2/rank1.log",
                            ssh="root@10.237.0.2", node_index=1)]})
    back = from_head(restarted, mine)
    assert back.run_id == "def" and [r.pid for r in back.ranks] == [300, 400]
    assert [(r.host, r.ssh) for r in back.ranks] == [("node-a", "root@10.237.0.1"), ("node-b", "root@10.237.0.2")]
    assert back.endpoint == mine.endpoint and back.ssh_config == "/control/ssh_config"
    assert back.recipe.nodes == mine.recipe.nodes and back.gpu_baseline_mib == mine.gpu_baseline_mib


def test_another_runs_record_is_refused(tmp_path: Path) -> None:
    mine = _record(tmp_path)
    with pytest.raises(RunError, match="not 'pp2'"):
        from_head(for_head(mine).model_copy(update={"name": "other"}), mine)


def _ref() -> HeadRef:
    return HeadRef(host="node-a", ssh="root@10.237.0.1", ssh_config="/control/ssh_config", home="/srv/fl",
                   forklift=["/opt/venv/bin/python", "-m", "forklift.cli.main"], log="/srv/fl/runs/pp2/supervisor.out")


def test_supervisor_state_keys_follow_node_0s_name_both_ways() -> None:
    state = SupervisorState(name="pp2", state="watching", pid=7, host="a", head=_ref(),
                            baseline_mem_available={"node-a": 5, "node-b": 6}, boot_ids={"node-a": "x"})
    there = state_for_head(state, "node-a")
    assert there.head is None and there.pid is None
    assert there.baseline_mem_available == {LOCAL_HOST: 5, "node-b": 6} and there.boot_ids == {LOCAL_HOST: "x"}
    back = state_from_head(there.model_copy(update={"pid": 9}).model_dump_json(), _ref())
    assert back.head == _ref() and back.pid == 9
    assert back.baseline_mem_available == {"node-a": 5, "node-b": 6} and back.boot_ids == {"node-a": "x"}
    with pytest.raises(RunError, match="cannot be read"):
        state_from_head("{not json", _ref())


def test_the_receipt_is_the_last_json_line() -> None:
    out = 'a banner\n{"home": "/srv/fl", "hostname": "spark-a", "pid": 42, "log": "/srv/fl/runs/x/supervisor.out"}\n'
    assert parse_receipt(out, "node-a")["pid"] == 42
    for bad in ("", "ok\n", '{"pid": 4}\n'):
        with pytest.raises(RemoteHeadError, match="node-a"):
            parse_receipt(bad, "node-a")


ARGV = ["/opt/venv/bin/python", "-m", "forklift.cli.main", "supervise", "pp2", "--receive", "--detach"]


@pytest.mark.parametrize(("code", "stderr", "says"), [
    (127, "sh: 1: forklift: not found", "not installed"),
    (127, "bash: line 1: /opt/venv/bin/python: No such file or directory", "not installed"),
    (1, "/opt/venv/bin/python: Error while finding module specification for 'forklift.cli.main' "
        "(ModuleNotFoundError: No module named 'forklift')", "not installed"),
    (2, "No such option: --receive", "too old"),
    (2, "Error: No such command 'supervise'.", "too old"),
    (1, "StateDirError: cannot write the run record", "failed"),
])
def test_why_the_head_refused_names_the_fix(code: int, stderr: str, says: str) -> None:
    err = failure(Completed("node-a", tuple(ARGV), code, "", stderr), ARGV, "node-a")
    assert says in err.message and "node-a" in err.message and err.fix
    if says == "not installed":
        assert "Install forklift on node-a" in err.fix and "supervise.where: here" in err.fix
        assert "supervise.forklift" in err.fix


def test_forklift_on_the_head_is_the_runtimes_python_unless_named(tmp_path: Path) -> None:
    rec = _record(tmp_path)
    assert head_forklift(rec.recipe) == ["/opt/venv/bin/python", "-m", "forklift.cli.main"]
    assert on_head(rec.recipe)
    named = _record(tmp_path, supervise=", forklift: [/usr/local/bin/forklift], where: here")
    assert head_forklift(named.recipe) == ["/usr/local/bin/forklift"] and not on_head(named.recipe)
    with pytest.raises(RecipeError, match="where"):
        _record(tmp_path, supervise=", where: laptop")


def test_start_on_head_sends_the_record_and_key_on_stdin_and_keeps_the_receipt(tmp_path: Path) -> None:
    rec = _record(tmp_path, key=", api_key_env: PP2_KEY")
    receipt = {"home": "/srv/fl", "hostname": "spark-a", "pid": 4321, "log": "/srv/fl/runs/pp2/supervisor.out"}
    runner = FakeRunner("node-a").on(["/opt/venv/bin/python"], stdout=json.dumps(receipt) + "\n")
    state = start_on_head(rec, {"node-a": 1, "node-b": 2}, runner=runner, environ={"PP2_KEY": SECRET})
    (call,) = runner.calls
    assert list(call.argv) == ARGV and SECRET not in " ".join(call.argv)
    sent = json.loads(call.input or "")
    assert sent["secrets"] == {"PP2_KEY": SECRET}
    assert sent["record"]["plan"]["deployment"]["recipe"]["nodes"][0]["host"] == LOCAL_HOST
    assert sent["state"]["baseline_mem_available"] == {LOCAL_HOST: 1, "node-b": 2}
    kept = load_state("pp2")
    assert kept is not None and kept == state and SECRET not in kept.model_dump_json()
    assert kept.pid == 4321 and kept.host == "spark-a" and kept.baseline_mem_available == {"node-a": 1, "node-b": 2}
    assert kept.head == HeadRef(host="node-a", ssh="root@10.237.0.1", ssh_config="/control/ssh_config",
                                home="/srv/fl", forklift=ARGV[:3], log=receipt["log"])


def test_start_on_head_without_forklift_there_says_so(tmp_path: Path) -> None:
    runner = FakeRunner("node-a").on(["/opt/venv/bin/python"], returncode=127,
                                     stderr="bash: /opt/venv/bin/python: No such file or directory")
    with pytest.raises(RemoteHeadError, match="not installed on the head"):
        start_on_head(_record(tmp_path), {}, runner=runner)


def test_the_head_keeps_what_it_received(tmp_path: Path) -> None:
    """The head's side (no --detach): the record and state land in this forklift home, as sent."""
    rec = _record(tmp_path)
    text = bundle(rec, SupervisorState(name="pp2", restarts=[1.0]), {})
    out = receive(text, detach=False)
    assert out["hostname"] == socket.gethostname() and Path(out["home"]).is_dir()
    kept = load_record("pp2")
    assert kept.recipe.head.is_local and kept.ranks[0].host == LOCAL_HOST
    state = load_state("pp2")
    assert state is not None and state.restarts == [1.0] and state.head is None
    with pytest.raises(RemoteHeadError, match="cannot be read"):
        receive('{"record": {}}', detach=False)


def _head_answers(rec: RunRecord, state: SupervisorState, ps: str = "") -> FakeRunner:
    rec_path, state_path = head_paths(_ref(), "pp2")
    return (FakeRunner("node-a").on(["cat", rec_path], stdout=rec.model_dump_json())
            .on(["cat", state_path], stdout=state.model_dump_json()).on(["ps"], stdout=ps))


def test_status_reads_the_heads_restart_over_ssh(tmp_path: Path) -> None:
    mine = _record(tmp_path)
    mine.save()
    restarted = for_head(mine).model_copy(update={"run_id": "def", "created_at": mine.created_at + 60, "ranks": [
        RankState(rank=0, host=LOCAL_HOST, pid=300, pgid=300, log_path="/srv/fl/runs/pp2/rank0.log", node_index=0),
        RankState(rank=1, host="node-b", pid=400, pgid=400, log_path="/root/n2/rank1.log", ssh="root@10.237.0.2",
                  node_index=1)]})
    theirs = SupervisorState(name="pp2", state="watching", pid=4321, host="spark-a", restarts=[100.0],
                             last_recovery_s=61.5, baseline_mem_available={LOCAL_HOST: 5})
    got, state, problem = sync(mine, _ref(), _head_answers(restarted, theirs))
    assert problem is None and state is not None
    assert got.run_id == "def" and load_record("pp2").run_id == "def"  # kept here: logs, check, down use it
    assert load_record("pp2").ranks[0].host == "node-a" and load_record("pp2").ranks[0].ssh == "root@10.237.0.1"
    kept = load_state("pp2")
    assert kept is not None and kept.head == _ref() and kept.restarts == [100.0] and kept.last_recovery_s == 61.5
    assert kept.baseline_mem_available == {"node-a": 5}


def test_a_run_started_here_again_is_not_replaced_by_the_heads_older_copy(tmp_path: Path) -> None:
    old = _record(tmp_path).model_copy(update={"status": "stopped", "created_at": 1000.0})
    mine = _record(tmp_path).model_copy(update={"run_id": "new", "created_at": 2000.0})
    mine.save()
    got, state, problem = sync(mine, _ref(), _head_answers(for_head(old), SupervisorState(name="pp2")))
    assert got is mine and state is None and problem is None and load_record("pp2").run_id == "new"


def test_an_unreadable_head_leaves_this_machines_view_and_says_why(tmp_path: Path) -> None:
    mine = _record(tmp_path)
    rec_path, _ = head_paths(_ref(), "pp2")
    runner = FakeRunner("node-a").on(["cat", rec_path], returncode=1, stderr=f"cat: {rec_path}: No such file")
    got, state, problem = sync(mine, _ref(), runner)
    assert got is mine and state is None and problem is not None and "No such file" in problem


def test_the_heads_supervisor_is_seen_and_stopped_through_the_heads_runner(tmp_path: Path) -> None:
    args = "S /opt/venv/bin/python -m forklift.cli.main supervise pp2"
    save_state(SupervisorState(name="pp2", state="watching", pid=4321, host="spark-a", head=_ref()))
    answers = [args, args, ""]
    runner = FakeRunner("node-a").on(["ps"], stdout=lambda argv: answers.pop(0) if answers else "")
    assert supervisor_state("pp2", runner)[1] is True  # another host name, but asked on that host
    assert stop_supervisor("pp2", grace_s=5, runner=runner) == "supervisor pid 4321 on node-a stopped"
    assert [c.argv for c in runner.ran("kill")] == [("kill", "-TERM", "4321")]


def test_down_marks_the_heads_copy_stopped(tmp_path: Path) -> None:
    mine = _record(tmp_path).model_copy(update={"status": "stopped"})
    runner = FakeRunner("node-a")
    mark_stopped(mine, SupervisorState(name="pp2", state="stopped", head=_ref()), _ref(), runner)
    writes = {c.argv[1]: c.input or "" for c in runner.ran("tee")}
    rec_path, state_path = head_paths(_ref(), "pp2")
    written = RunRecord.model_validate_json(writes[rec_path])
    assert written.status == "stopped" and written.recipe.head.is_local  # the head's view: a unit there stays down
    assert json.loads(writes[state_path])["state"] == "stopped"


def test_the_unit_for_a_remote_head_is_rendered_with_the_heads_forklift_and_written_there(tmp_path: Path) -> None:
    rec = _record(tmp_path, key=", api_key_env: PP2_KEY")
    receipt = {"home": "/srv/fl", "hostname": "spark-a", "user": "svc",
               "environment": {"FORKLIFT_CACHE": "/srv/cache", "PYTHONPATH": "/srv/src"}}
    runner = FakeRunner("node-a").on(["/opt/venv/bin/python"], stdout=json.dumps(receipt) + "\n")
    plan = install_on_head(rec, start=True, runner=runner, environ={"PP2_KEY": SECRET, "PYTHONPATH": "/here/src"})
    receive_call = runner.calls[0]
    assert list(receive_call.argv) == [*ARGV[:5], "--receive"]  # kept there, not started: the unit starts it
    assert json.loads(receive_call.input or "")["secrets"] == {}  # the key goes to the credentials file only
    assert "ExecStart=/opt/venv/bin/python -m forklift.cli.main supervise pp2" in plan.unit_text
    assert "Environment=FORKLIFT_HOME=/srv/fl" in plan.unit_text and "User=svc" in plan.unit_text
    assert "PYTHONPATH=/srv/src" in plan.unit_text and "/here/src" not in plan.unit_text  # the head's, not ours
    assert SECRET not in plan.unit_text
    steps = [c for c in runner.calls[1:]]
    assert [c.argv[:2] for c in steps][-2:] == [("systemctl", "daemon-reload"), ("systemctl", "enable")]
    assert any(c.input and SECRET in c.input and c.argv[-1].endswith("pp2.env") for c in steps)  # via SSH stdin
    kept = load_state("pp2")
    assert kept is not None and kept.head is not None and kept.head.home == "/srv/fl" and kept.pid is None


def test_a_dry_run_unit_on_a_remote_head_keeps_nothing_there(tmp_path: Path) -> None:
    receipt = {"home": "/srv/fl", "hostname": "spark-a", "user": "root", "environment": {}}
    runner = FakeRunner("node-a").on(["/opt/venv/bin/python"], stdout=json.dumps(receipt) + "\n")
    plan = install_on_head(_record(tmp_path), dry_run=True, runner=runner)
    assert len(runner.calls) == 1 and runner.calls[0].input == ""  # the head only says where
    assert plan.actions and load_state("pp2") is None
    assert receive("", detach=False)["home"]  # the head's side of it: nothing kept
    with pytest.raises(RunError):
        load_record("pp2")


def test_receiving_for_a_unit_leaves_a_running_supervisor_its_own_state(tmp_path: Path) -> None:
    for_head(_record(tmp_path)).save()
    looks_like_one = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "forklift", "supervise",
                                       "pp2"])
    try:
        while b"forklift" not in Path(f"/proc/{looks_like_one.pid}/cmdline").read_bytes():  # exec'd yet
            time.sleep(0.05)
        save_state(SupervisorState(name="pp2", state="watching", pid=looks_like_one.pid, host=socket.gethostname()))
        out = receive(bundle(_record(tmp_path), SupervisorState(name="pp2"), {}), detach=False)
        assert out["kept"] is False and looks_like_one.poll() is None  # neither replaced nor stopped
        state = load_state("pp2")
        assert state is not None and state.pid == looks_like_one.pid and state.state == "watching"
    finally:
        looks_like_one.kill()
        looks_like_one.wait()
    out = receive(bundle(_record(tmp_path), SupervisorState(name="pp2", restarts=[5.0]), {}), detach=False)
    assert out["kept"] is True and (state := load_state("pp2")) is not None and state.restarts == [5.0]
