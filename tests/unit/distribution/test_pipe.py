"""The relay's pipe through this machine names the side that failed and leaves no process behind."""

from __future__ import annotations

import subprocess
import threading

import pytest

from forklift.distribution.transfer import pipe
from forklift.errors import TransferError
from forklift.runner import LocalRunner

SOURCE = ["head", "-c", "200000000", "/dev/zero"]


def test_a_target_that_dies_is_named_with_its_own_error() -> None:
    here = LocalRunner()
    target = ["sh", "-c", "head -c 1000 >/dev/null; echo 'No space left on device' >&2; exit 1"]
    with pytest.raises(TransferError) as err:
        pipe(here, SOURCE, here, target, on_bytes=lambda _n: None, cancel=threading.Event(), what="copy")
    assert "writing on" in err.value.message and "No space left on device" in err.value.message


def test_a_source_that_fails_is_named() -> None:
    here = LocalRunner()
    with pytest.raises(TransferError) as err:
        pipe(here, ["cat", "/nonexistent/forklift"], here, ["cat"], on_bytes=lambda _n: None,
             cancel=threading.Event(), what="copy")
    assert "reading on" in err.value.message and "No such file" in err.value.message


def test_an_error_in_the_pump_kills_both_sides() -> None:
    here = LocalRunner()
    seen: list[int] = []

    def boom(n: int) -> None:
        seen.append(n)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pipe(here, ["yes", "forklift-pipe-test"], here, ["sh", "-c", "exec cat >/dev/null"], on_bytes=boom,
             cancel=threading.Event(), what="copy")
    assert seen
    alive = subprocess.run(["pgrep", "-f", "yes forklift-pipe-test"], capture_output=True, text=True,
                           check=False).stdout
    assert not alive.split(), alive
