"""Active tests between nodes, each bounded: the head's master (and Ray) port reached from every other node while
forklift listens there, then TCP throughput with iperf3 and RDMA write bandwidth with ``ib_write_bw`` (perftest)
per node pair, in rounds of disjoint pairs. Servers started for a test are stopped after it."""

from __future__ import annotations

import json
import secrets
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forklift.net import parse
from forklift.net.gather import host_python, program_source, run_program
from forklift.net.topology import Bandwidth, NodeNet, PortProbe
from forklift.recipe.schema import Recipe
from forklift.runner import Runner, fan_out

CONNECT_TRIES = 5
CONNECT_TIMEOUT_S = 2.0
IPERF_SECONDS = 2
IPERF_STREAMS = 8
"""One iperf3 thread cannot fill a 100 Gb/s rail with one stream (pycloudlib#477); GB10 guides use -P 4..16."""
IPERF_PORT = 5201
PERFTEST_PORT = 18515
IB_SECONDS = 2


@dataclass(frozen=True)
class PortSpec:
    label: str
    port: int


def ports_to_test(recipe: Recipe) -> list[PortSpec]:
    if len(recipe.nodes) < 2:
        return []
    out = [PortSpec("master port", recipe.network.master_port)]
    if recipe.parallel.backend == "ray":
        out.append(PortSpec("ray port", recipe.ray.port))
    return out


LISTEN_LOG = "/tmp/forklift-net-listen-{port}-{token}.log"
"""A fresh name per probe (two checks at once must not share a log; a planted file is never the one written)."""
LISTEN_SAFETY_S = 60
"""The listener exits by itself after this long even if forklift could not stop it."""


def _start_listener(runner: Runner, python: str, head_ip: str, free: Sequence[PortSpec]) -> tuple[int, str]:
    """Spawn the gather program's listener on the head; returns (pid, log path). Its first log line says which
    ip:port it bound."""
    log = LISTEN_LOG.format(port=free[0].port, token=secrets.token_hex(6))
    args = {"listen": [[head_ip, s.port] for s in free], "listen_s": LISTEN_SAFETY_S, "expect": 1 << 30}
    spawned = runner.spawn([python, "-c", program_source(), json.dumps(args)], log_path=log)
    return spawned.pid, log


def _stop_listener(runner: Runner, pid: int, log: str) -> dict[str, Any]:
    text = runner.run(["cat", log], timeout=15).stdout
    runner.run(["kill", str(pid)], timeout=15)
    runner.run(["rm", "-f", log], timeout=15)
    for line in text.splitlines():
        try:
            out: dict[str, Any] = json.loads(line)
            return out
        except ValueError:
            continue
    return {"bound": [], "errors": {"listener": (text.strip() or "no output")[-200:]}}


def reach_ports(recipe: Recipe, runners: Mapping[int, Runner], head_ip: str, specs: Sequence[PortSpec],
                listening: frozenset[int]) -> list[PortProbe]:
    """Listen on the head at ``head_ip`` on each port not already taken while every other node connects to it
    ``CONNECT_TRIES`` times, then stop listening; an unreached port is named with how it failed (timeout: a
    firewall drops it)."""
    head, hosts = recipe.head.host, [n.host for n in recipe.nodes]
    free = [s for s in specs if s.port not in listening]
    if not free or len(runners) < 2 or 0 not in runners:
        return []
    python = host_python(recipe)
    pid, log = _start_listener(runners[0], python, head_ip, free)
    try:
        time.sleep(0.3)  # a refusal is retried for 1.5 s anyway (gather_program.REFUSED_GRACE_S)
        args = {"facts": False, "connect": [[head_ip, s.port, CONNECT_TRIES] for s in free],
                "timeout": CONNECT_TIMEOUT_S}
        done = fan_out(((i, i) for i in runners if i != 0), lambda i: run_program(runners[i], python, args))
    finally:
        listened = _stop_listener(runners[0], pid, log)
    bound = set(listened.get("bound", []))
    out: list[PortProbe] = []
    for i in sorted(k for k in runners if k != 0):
        results = done.results.get(i, {}).get("connects", [])
        failed = str(done.errors[i]) if i in done.errors else "no result from the probe"
        for k, spec in enumerate(free):
            if f"{head_ip}:{spec.port}" not in bound:
                why = listened.get("errors", {})
                error = why.get(f"{head_ip}:{spec.port}") or why.get("listener") or "forklift could not listen there"
                out.append(PortProbe(hosts[i], head, head_ip, spec.port, spec.label, False, f"not tested: {error}"))
            elif k >= len(results):
                out.append(PortProbe(hosts[i], head, head_ip, spec.port, spec.label, False, f"not tested: {failed}"))
            else:
                res = results[k]
                rtts = tuple(round(float(x), 3) for x in res.get("rtt_ms", []))
                out.append(PortProbe(hosts[i], head, head_ip, spec.port, spec.label, not res.get("error"),
                                     res.get("error"), rtts))
    return out


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """All pairs (a < b) of n nodes in rounds where no node is in two pairs (the circle method)."""
    ids: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(ids)
    out: list[list[tuple[int, int]]] = []
    for _ in range(m - 1):
        pairs = [(ids[k], ids[m - 1 - k]) for k in range(m // 2)]
        out.append([(min(a, b), max(a, b)) for a, b in pairs if a is not None and b is not None])
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return [r for r in out if r]


def _free_port(node: NodeNet, start: int) -> int:
    port = start
    while port in node.listening:
        port += 1
    return port


def _serve_and_run(server_runner: Runner, server_argv: list[str], client: Callable[[], str],
                   log: str) -> str:
    """Start a server, run the client (which retries while the server comes up), stop the server."""
    spawned = server_runner.spawn(server_argv, log_path=log)
    try:
        return client()
    finally:
        server_runner.run(["kill", str(spawned.pid)], timeout=15)
        server_runner.run(["rm", "-f", log], timeout=15)


def _retrying(runner: Runner, argv: list[str], timeout: float, ready: Callable[[str], bool]) -> str:
    """Run argv until ``ready(output)`` or three tries (the server may still be starting)."""
    text = ""
    for attempt in range(4):
        res = runner.run(argv, timeout=timeout)
        text = res.stdout + res.stderr
        if ready(text):
            break
        time.sleep(0.3 * (attempt + 1))
    return text


def iperf3(runners: Mapping[int, Runner], hosts: Sequence[str], a: int, b: int, ip: str,
           server: NodeNet) -> Bandwidth:
    """iperf3 from node a to node b's ``ip`` for IPERF_SECONDS with IPERF_STREAMS streams."""
    port = _free_port(server, IPERF_PORT)
    argv = ["iperf3", "-c", ip, "-p", str(port), "-t", str(IPERF_SECONDS), "-P", str(IPERF_STREAMS), "-J",
            "--connect-timeout", "2000"]

    def client() -> str:
        return _retrying(runners[a], argv, IPERF_SECONDS + 15,
                         lambda t: "connection refused" not in t.lower() and "unable to connect" not in t.lower())

    text = _serve_and_run(runners[b], ["iperf3", "-s", "-1", "-p", str(port), "-B", ip], client,
                          f"/tmp/forklift-net-iperf3-{port}-{secrets.token_hex(6)}.log")
    got = parse.iperf3(text[: text.rfind("}") + 1] if "}" in text else text)
    return Bandwidth(hosts[a], hosts[b], ip, "iperf3", gbit=got.get("gbit"), seconds=got.get("seconds"),
                     streams=int(got.get("streams") or IPERF_STREAMS), retransmits=got.get("retransmits"),
                     error=got.get("error"))


def ib_write_bw(runners: Mapping[int, Runner], hosts: Sequence[str], a: int, b: int, ip: str,
                hcas: tuple[str, str], gid: tuple[int | None, int | None], server: NodeNet) -> Bandwidth:
    """ib_write_bw from node a's HCA to node b's (the device on the interface each uses for the pair)."""
    port = _free_port(server, PERFTEST_PORT)
    common = ["-p", str(port), "-F", "--report_gbits", "-D", str(IB_SECONDS)]
    server_argv = ["ib_write_bw", "-d", hcas[1], *common, *(["-x", str(gid[1])] if gid[1] is not None else [])]
    client_argv = ["ib_write_bw", "-d", hcas[0], *common, *(["-x", str(gid[0])] if gid[0] is not None else []), ip]

    def client() -> str:
        return _retrying(runners[a], client_argv, IB_SECONDS + 20, lambda t: "BW average" in t)

    log = f"/tmp/forklift-net-ibwb-{port}-{secrets.token_hex(6)}.log"
    text = _serve_and_run(runners[b], server_argv, client, log)
    got = parse.ib_write_bw(text)
    error = None if got.get("gbit") is not None else (text.strip().splitlines() or ["no output"])[-1][:200]
    return Bandwidth(hosts[a], hosts[b], ip, "ib_write_bw", gbit=got.get("gbit"), seconds=float(IB_SECONDS),
                     device=hcas[0], error=error)


def median_rtt(probes: Sequence[PortProbe], src: str) -> float | None:
    rtts = [x for p in probes if p.src == src for x in p.rtt_ms]
    return round(statistics.median(rtts), 3) if rtts else None
