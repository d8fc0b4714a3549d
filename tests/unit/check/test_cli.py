"""`forklift check` exit codes without a server: 2 whenever the suite could not run (README)."""

from __future__ import annotations

import io
import socket
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from forklift.cli.main import main


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["forklift", *argv]
    try:
        with redirect_stdout(out), redirect_stderr(err):
            main()
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue(), err.getvalue()
    finally:
        sys.argv = old
    return 0, out.getvalue(), err.getvalue()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("command", ["check", "bench"])
def test_a_run_that_does_not_exist_exits_2(command: str) -> None:
    rc, out, err = _run(command, "no-such-run")
    assert rc == 2 and out == ""
    assert "RunNotFoundError: no run named 'no-such-run'" in err and "fix:" in err and "Traceback" not in err


def test_several_runs_and_none_named_exits_2(_isolated_home: Path) -> None:
    for name in ("a", "b"):
        (_isolated_home / "runs" / name).mkdir(parents=True)
        (_isolated_home / "runs" / name / "record.json").write_text("{}")
    rc, _, err = _run("check")
    assert rc == 2 and "several runs exist (a, b); say which" in err


def test_unreachable_and_bad_arguments_exit_2() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    rc, out, err = _run("check", "--url", url, "--json")
    assert rc == 2 and out == "" and f"EndpointError: cannot reach {url}: ConnectError" in err
    rc, _, err = _run("check", "--url", url, "--quick", "--full")
    assert rc == 2 and "--quick and --full exclude each other" in err
    rc, _, err = _run("check", "--url", url, "--only", "needles")
    assert rc == 2 and "unknown check(s) needles" in err
    rc, _, err = _run("check", "--url", "ftp://x")
    assert rc == 2 and "not an http(s) URL: 'ftp://x'" in err
