"""net reads the LISTEN ports from the gather program's raw /proc/net/tcp with the host parser (one parser)."""

from __future__ import annotations

from tests.unit.net.gb10 import node_a


def test_the_gathered_tcp_table_gives_the_listening_ports() -> None:
    assert node_a().listening == frozenset({22})
