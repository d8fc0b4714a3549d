"""What a node says about itself right now, in one command through its Runner (local or over SSH).

Memory from /proc/meminfo (MemAvailable is what a unified-memory node such as the GB10 has left for the
GPU too), load from /proc/loadavg, per GPU utilisation, memory, temperature, power and SM clock from
``nvidia-smi`` when the node has it, and the last lines of forklift's node guard log when it exists (the
guard is the one supervisor forklift installs: ``forklift node apply``). Nothing is installed on the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forklift.errors import RunnerError
from forklift.host.parse import meminfo as parse_meminfo
from forklift.node.facts import GUARD_LOG
from forklift.runner import Runner

GPU_FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total", "temperature.gpu", "power.draw",
              "clocks.sm")
_SEP = "--forklift-monitor--"
_PROGRAM = (
    f'cat /proc/meminfo; echo {_SEP}; cat /proc/loadavg; echo {_SEP}; '
    f'command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu={",".join(GPU_FIELDS)} '
    f'--format=csv,noheader,nounits 2>/dev/null; echo {_SEP}; '
    f'[ -r "$1" ] && tail -n "$2" -- "$1" 2>/dev/null; true'
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    utilization_pct: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    temperature_c: float | None
    power_w: float | None
    sm_clock_mhz: float | None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class NodeSample:
    """One node's facts; ``error`` says why there are none."""

    host: str
    mem_total_bytes: int | None = None
    mem_available_bytes: int | None = None
    swap_used_bytes: int | None = None
    load_1m: float | None = None
    gpus: tuple[Gpu, ...] = ()
    guard_events: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "mem_total_bytes": self.mem_total_bytes,
                "mem_available_bytes": self.mem_available_bytes, "swap_used_bytes": self.swap_used_bytes,
                "load_1m": self.load_1m, "gpus": [g.to_json() for g in self.gpus],
                "guard_events": list(self.guard_events), "error": self.error}


def _num(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_gpus(text: str) -> tuple[Gpu, ...]:
    """``nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits`` output."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(GPU_FIELDS) or not parts[0].isdigit():
            continue
        out.append(Gpu(index=int(parts[0]), name=parts[1], utilization_pct=_num(parts[2]),
                       memory_used_mib=_num(parts[3]), memory_total_mib=_num(parts[4]),
                       temperature_c=_num(parts[5]), power_w=_num(parts[6]), sm_clock_mhz=_num(parts[7])))
    return tuple(out)


def parse(host: str, text: str) -> NodeSample:
    """The program's output: meminfo, loadavg, nvidia-smi rows, guard log lines, split by a marker line."""
    parts = text.split(_SEP + "\n")
    if len(parts) < 4:
        return NodeSample(host, error="the node's answer was cut short")
    mem = parse_meminfo(parts[0])
    load = parts[1].split()
    swap = (mem["SwapTotal"] - mem["SwapFree"]) if "SwapTotal" in mem and "SwapFree" in mem else None
    return NodeSample(host=host, mem_total_bytes=mem.get("MemTotal"), mem_available_bytes=mem.get("MemAvailable"),
                      swap_used_bytes=swap, load_1m=_num(load[0]) if load else None, gpus=parse_gpus(parts[2]),
                      guard_events=tuple(line for line in parts[3].splitlines() if line.strip()))


def sample(runner: Runner, *, guard_lines: int = 3, timeout: float = 15) -> NodeSample:
    """Read one node. Never raises: a node that cannot be reached comes back with ``error``."""
    try:
        res = runner.run(["sh", "-c", _PROGRAM, "forklift-monitor", GUARD_LOG, str(guard_lines)], timeout=timeout)
    except RunnerError as exc:
        return NodeSample(runner.host, error=str(exc))
    if res.returncode != 0:
        return NodeSample(runner.host, error=f"exited {res.returncode}: {res.stderr.strip()[-200:]}")
    return parse(runner.host, res.stdout)

