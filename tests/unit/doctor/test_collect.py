"""cluster.collect: every rank's log and each node's kernel log, Ray logs and memory, through the Runner;
an unreachable node becomes a line doctor reads. (The real thing over SSH: tests/cluster/test_doctor_collect.py.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from forklift.cluster.collect import collect
from forklift.errors import RemoteCommandError
from forklift.recipe.schema import Recipe
from forklift.record import RankState
from forklift.runner import FakeRunner

MEMINFO = "MemTotal:       131072000 kB\nMemFree:          100 kB\nMemAvailable:    6553600 kB\n"


def _record() -> Any:
    recipe = Recipe.model_validate({
        "model": {"source": "/m"},
        "nodes": [{"host": "node-a", "ssh": "root@10.0.0.1"}, {"host": "node-b", "ssh": "root@10.0.0.2"}],
        "parallel": {"pp": 2, "backend": "ray"},
    })
    ranks = [RankState(rank=0, host="node-a", pid=1, log_path="/runs/r/rank0.log", node_index=0),
             RankState(rank=1, host="node-b", pid=2, log_path="/runs/r/rank1.log", node_index=1)]
    return SimpleNamespace(recipe=recipe, ranks=ranks)


def _node(host: str, log: str) -> FakeRunner:
    r = FakeRunner(host=host)
    r.on(["cat", "/proc/meminfo"], stdout=MEMINFO)
    r.on(["dmesg", "--time-format=iso"],
         stdout="2026-11-30T10:00:00,000000+00:00 Out of memory: Killed process 311 (python3)\n")
    r.on(["sh", "-c"], stdout="==> /tmp/ray/session_latest/logs/raylet.err <==\nraylet died\n")
    r.on(["tail", "-c"], stdout=log)
    return r


def test_collects_every_rank_log_and_every_nodes_kernel_ray_and_memory() -> None:
    a, b = _node("node-a", "INFO rank 0 ok\n"), _node("node-b", "ERROR rank 1 died\n")
    got = collect(_record(), {0: a, 1: b})
    labels = {(p.host, p.label) for p in got.pieces}
    assert {("node-a", "rank 0 log"), ("node-b", "rank 1 log"), ("node-a", "dmesg"), ("node-b", "dmesg"),
            ("node-a", "ray logs"), ("node-b", "memory")} <= labels
    assert got.mem_available["node-b"] == (6553600 * 1024, 131072000 * 1024)
    assert got.unreachable == {}
    assert any(c.argv[:2] == ("tail", "-c") and c.argv[-1] == "/runs/r/rank1.log" for c in b.calls)


def test_journal_is_read_where_dmesg_is_refused() -> None:
    a = FakeRunner(host="node-a")
    a.on(["dmesg", "--time-format=iso"], stderr="dmesg: read kernel buffer failed: Operation not permitted",
         returncode=1)
    a.on(["journalctl", "-k"], stdout="kernel: NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n")
    got = collect(_record(), {0: a, 1: _node("node-b", "")})
    kernel = [p for p in got.pieces if p.host == "node-a" and p.label == "journalctl -k"]
    assert kernel and "Xid" in kernel[0].text


def test_an_unreachable_node_becomes_a_line_and_the_others_are_still_read() -> None:
    class Down(FakeRunner):
        def run(self, argv: Any, **kw: Any) -> Any:
            raise RemoteCommandError("node-b: ssh: connect to host 10.0.0.2 port 22: Connection timed out",
                                     host="node-b", argv=argv, returncode=255)

    got = collect(_record(), {0: _node("node-a", "INFO ok\n"), 1: Down(host="node-b")})
    assert "node-b" in got.unreachable
    line = next(p.text for p in got.pieces if p.host == "node-b")
    assert line.startswith("forklift: node node-b unreachable over ssh")
    assert any(p.label == "rank 0 log" for p in got.pieces)


def test_a_node_memory_line_comes_from_the_host_probe() -> None:
    got = collect(_record(), {0: _node("node-a", "INFO ok\n"), 1: _node("node-b", "INFO ok\n")})
    assert got.mem_available["node-a"] == (6553600 * 1024, 131072000 * 1024)


def test_kernel_lines_from_before_the_run_are_left_out() -> None:
    import time

    from forklift.cluster.collect import since_filter

    lines = ["[Mon Nov 30 10:00:00 2026] Out of memory: Killed process 1 (old)",
             "[Mon Nov 30 12:00:00 2026] Out of memory: Killed process 2 (this run)",
             "a line without a time"]
    since = time.mktime(time.strptime("Mon Nov 30 11:00:00 2026", "%a %b %d %H:%M:%S %Y"))
    assert since_filter(lines, since) == lines[1:]
    assert since_filter(lines, None) == lines


def test_iso_kernel_times_carry_the_nodes_own_offset() -> None:
    from datetime import datetime

    from forklift.cluster.collect import since_filter

    since = datetime.fromisoformat("2026-11-30T11:00:00+00:00").timestamp()
    lines = ["2026-11-30T11:30:00,000001+02:00 Out of memory: Killed process 1 (09:30 UTC: before the run)",
             "2026-11-30T06:30:00,5+00:00 not this either",
             "2026-11-30T07:30:00,123456-04:00 Out of memory: Killed process 2 (11:30 UTC: this run)",
             "2026-11-30T11:00:01,000000+0000 NVRM: Xid 79 (this run)"]
    assert since_filter(lines, since) == lines[2:]


def test_a_kernel_messages_untimed_continuation_lines_go_with_it() -> None:
    from datetime import datetime

    from forklift.cluster.collect import since_filter

    since = datetime.fromisoformat("2026-11-30T11:00:00+00:00").timestamp()
    lines = ["an untimed line before any time (kept: nothing says it is old)",
             "2026-11-30T09:00:00,000000+00:00 ACPI CPPC: firmware does not support it (boot, before the run)",
             "                                 Please enable it if your BIOS has the CPPC option.",
             "2026-11-30T11:30:00,000000+00:00 Out of memory: Killed process 2 (this run)",
             "                                 oom_score_adj 0"]
    assert since_filter(lines, since) == [lines[0], lines[3], lines[4]]


def test_a_dead_rank_of_a_running_run_is_named_and_diagnosed() -> None:
    from forklift.doctor import Source, diagnose_sources, scan_text

    def quiet(host: str, log: str) -> FakeRunner:
        r = FakeRunner(host=host)
        r.on(["cat", "/proc/meminfo"], stdout=MEMINFO).on(["tail", "-c"], stdout=log)
        return r

    record = _record()
    record.status = "ready"
    a, b = quiet("node-a", "INFO: 10.0.0.1 - POST /v1/chat/completions 200 OK\n"), quiet("node-b", "")
    b.on(["kill", "-0"], returncode=1)
    got = collect(record, {0: a, 1: b})
    gone = [p.text for p in got.pieces if p.label == "rank 1 process"]
    assert gone == ["forklift: rank 1 on node-b is not running (pid 2) while the run is ready"]
    assert not [p for p in got.pieces if p.label == "rank 0 process"]
    report = diagnose_sources([Source(p.label, scan_text([p.text]), p.host) for p in got.pieces if p.text.strip()])
    assert report.top is not None and report.top.rule == "rank-process-gone" and report.top.host == "node-b"
    # with the kernel's OOM kill on that node in view, the kill is the better answer
    oom = _node("node-b", "")
    oom.on(["kill", "-0"], returncode=1)
    got = collect(record, {0: a, 1: oom})
    report = diagnose_sources([Source(p.label, scan_text([p.text]), p.host) for p in got.pieces if p.text.strip()])
    assert report.top is not None and report.top.category == "oom_host_unified_memory"


def test_a_rank_log_that_cannot_be_read_is_said_not_dropped() -> None:
    def lost(_argv: object) -> str:
        raise RemoteCommandError("node-b: ssh: connection reset", host="node-b", argv=["tail"], returncode=255)

    b = FakeRunner(host="node-b").on(["tail", "-c"], stdout=lost)
    for rule in _node("node-b", "")._rules:  # the rest of node-b answers
        b._rules.append(rule)
    got = collect(_record(), {0: _node("node-a", "INFO rank 0 ok\n"), 1: b})
    (piece,) = [p for p in got.pieces if p.host == "node-b" and p.label == "rank 1 log"]
    assert "could not read /runs/r/rank1.log on node-b" in piece.text and "connection reset" in piece.text
