"""Preflight names the process that holds a port, found through the Runner (the same way on a remote host)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from forklift.cluster.preflight import run_preflight
from forklift.host.procs import port_holder, port_holder_local
from forklift.recipe.schema import Recipe
from forklift.runner import Completed, LocalRunner, Runner
from tests.unit.cluster.fakes import HostSim, fake_vllm, two_node_recipe


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    """A socket this test process listens on (127.0.0.1, a port the kernel picks)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


def _own_cmdline() -> str:
    return Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


def test_holder_of_a_listening_socket_is_this_process(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    holder = port_holder(LocalRunner(), port)
    assert holder is not None and holder.pid == os.getpid()
    assert holder.cmdline == _own_cmdline()
    assert str(holder).startswith(f"pid {os.getpid()} (")
    assert port_holder_local(port) == str(holder)


def test_holder_of_an_ipv6_socket() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError:
            pytest.skip("no ::1 here")
        s.listen()
        holder = port_holder(LocalRunner(), s.getsockname()[1])
    assert holder is not None and holder.pid == os.getpid()


def test_nothing_listening_or_no_python_gives_none(listening: socket.socket) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening
        assert port_holder(LocalRunner(), s.getsockname()[1]) is None
    no_python = HostSim("node-a", {"python3": "/nonexistent/python3"})
    assert port_holder(no_python, listening.getsockname()[1]) is None


class Recording(LocalRunner):
    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        self.argvs.append(list(argv))
        return super().run(argv, timeout=timeout, env=env, input=input)


def test_the_port_travels_as_its_own_argument(listening: socket.socket) -> None:
    runner = Recording()
    port = listening.getsockname()[1]
    port_holder(runner, port)
    [argv] = runner.argvs
    assert argv[:2] == ["python3", "-c"] and argv[3:] == [str(port)] and str(port) not in argv[2]


def _recipe(tmp_path: Path, port: int) -> Recipe:
    return two_node_recipe(tmp_path, fake_vllm(tmp_path), port)


def _port_failures(recipe: Recipe, runners: Mapping[int, Runner]) -> list[tuple[str | None, str, str | None]]:
    report = run_preflight(recipe, runners, {i: recipe.model.source for i in runners})
    return [(c.host, c.summary, c.fix) for c in report.failures if c.name == "ports"]


def test_preflight_names_what_holds_the_head_port(tmp_path: Path, listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    recipe = _recipe(tmp_path, port)
    [(node, detail, fix)] = _port_failures(recipe, {0: HostSim("node-a"), 1: HostSim("node-b")})
    assert node == "node-a"
    assert detail.startswith(f"port {port} is already in use on node-a, held by pid {os.getpid()} (")
    assert f"Stop pid {os.getpid()} on node-a" in (fix or "")
    # best effort: without python3 on the host the failure stays, without a holder
    blind = HostSim("node-a", {"python3": "/nonexistent/python3"})
    [(_, detail, _)] = _port_failures(recipe, {0: blind, 1: HostSim("node-b")})
    assert detail == f"port {port} is already in use on node-a"
