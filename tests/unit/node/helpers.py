"""Facts for unit tests: a node described as data, no processes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from forklift.node import facts as F
from forklift.node.facts import FileFact, Heartbeat, PrepFacts, SwapArea, SwapFileFact, UnitFact
from forklift.runner import Completed

GIB = 1 << 30


def make_facts(**over: Any) -> PrepFacts:
    base = PrepFacts(
        host="spark1", root="/", uid=0, init="systemd", has_systemd=True, now=1000.0, hostname="spark1",
        sysctl={"vm.swappiness": "60", "vm.vfs_cache_pressure": "100", "vm.min_free_kbytes": "67584",
                "vm.dirty_ratio": "20", "vm.dirty_background_ratio": "10"},
        meminfo={"MemTotal": 121 * GIB, "MemFree": 100 * GIB, "MemAvailable": 110 * GIB, "Cached": 5 * GIB},
        swaps=(), files={F.FSTAB: FileFact(F.FSTAB, True, "644", "0:0", b"UUID=x / ext4 defaults 0 1")},
        existing_dirs=frozenset({"/etc", "/etc/sysctl.d", "/etc/systemd", "/etc/systemd/system", "/usr",
                                 "/usr/local", "/usr/local/lib", "/var", "/var/lib"}),
        swap_file=SwapFileFact(exists=False), guard_unit=UnitFact("not-found", "inactive"),
        display_manager=UnitFact("enabled", "active"), heartbeat_path=F.GUARD_HEARTBEAT, heartbeat=None,
        heartbeat_error="no heartbeat at /run/forklift/guard-heartbeat.json", other_guards=(),
        guard_python="/usr/bin/python3", guard_python_ok=True, sudo_ok=True,
    )
    return replace(base, **over)


def heartbeat(age: float, *, alive: bool = True, **data: Any) -> Heartbeat:
    return Heartbeat(data={"pid": 4242, "time": 1000.0 - age, "interval_s": 1.0, **data}, age_s=age, pid_alive=alive)


def swap(path: str, gib: float) -> SwapArea:
    return SwapArea(path, int(gib * GIB), 0)


class RecordingRunner:
    """Answers every command with success and remembers it (for execute, which must not run on refusal)."""

    host = "spark1"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        self.calls.append(list(argv))
        return Completed(self.host, tuple(argv), 0, "", "")

    def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None, secret_env: Mapping[str, str] | None = None) -> Any:
        raise AssertionError("not used")
