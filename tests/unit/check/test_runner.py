"""The runner turns a connection that breaks mid-suite into a failed check, not a traceback."""

from __future__ import annotations

import socket

from forklift.check.runner import Options, _guarded
from forklift.check.session import Discovery, Session
from forklift.check.target import Target


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_broken_connection_fails_the_check() -> None:
    target = Target(f"http://127.0.0.1:{_closed_port()}", model="m")
    s = Session(target, Discovery(listing=[{"id": "m"}], max_model_len=None, version=None), timeout_s=5)
    try:
        for check_id in ("endpoint", "completion"):
            result = _guarded(check_id, s, Options(), None)
            assert result.status == "fail"
            assert result.summary.startswith("request failed") or "Connect" in result.summary
    finally:
        s.close()
