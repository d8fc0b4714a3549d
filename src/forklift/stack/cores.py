"""Disjoint CPU cores for the vLLM-CPU members that share a host.

vLLM-CPU binds each rank's OpenMP threads itself when ``VLLM_CPU_OMP_THREADS_BIND`` is ``auto`` (its default):
per rank the cores of one NUMA node less ``local_world_size`` cores reserved for the scheduler
(``vllm/utils/ompmultiprocessing.py`` ``_get_autobind_cpu_ids``). Every server computes that alone, so two members
on one host get the same cores (on a one-NUMA-node host both bind core 0). The joint plan gives each member's ranks
cores of their own instead: the host's cores (this process's affinity for a local host) split over all the ranks
the members run there, an equal number per rank, the remainder to the members started first (largest first). The
value reaches vLLM as ``env.VLLM_CPU_OMP_THREADS_BIND`` (``|`` between a member's local ranks, vLLM's format).

The user's own setting wins: a member whose recipe or node env sets the variable keeps it (its listed cores are
left out of the split), and a local host where forklift's own environment sets it (every member would inherit it)
is left alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

VAR = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class Seat:
    """One member's ranks on one CPU host, in start order."""

    member: str
    ranks: int
    own: str | None = None
    """The member's own VLLM_CPU_OMP_THREADS_BIND there (recipe or node env), if any."""


@dataclass(frozen=True)
class Binding:
    """What the split decided for one host."""

    host: str
    cores: tuple[int, ...]
    """The host's cores the split started from (empty: unknown)."""
    binds: dict[str, str] = field(default_factory=dict)
    """member -> the value forklift sets (members keeping their own are absent)."""
    kept: dict[str, str] = field(default_factory=dict)
    """member -> its own value, kept."""
    note: str | None = None
    """Why forklift set nothing for some members here (None: nothing to say)."""


def parse_ids(text: str) -> list[int]:
    """vLLM's id list ('0-3,5', ranks joined by '|') as core ids; [] for 'auto', 'nobind' or anything unreadable."""
    out: list[int] = []
    for rank in text.split("|"):
        for part in rank.split(","):
            part = part.strip()
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                return []
            out += list(range(int(lo), int(hi or lo) + 1))
    return out


def id_list(cores: Sequence[int]) -> str:
    """Core ids as vLLM reads them, runs folded: [0, 1, 2, 5] -> '0-2,5'."""
    parts: list[str] = []
    run: list[int] = []
    for c in sorted(cores):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def split(host: str, cores: Sequence[int], seats: Sequence[Seat], *, inherited: str | None = None) -> Binding:
    """The cores of one host split among the seats that have no setting of their own.

    ``inherited``: the variable as the members' processes inherit it from forklift's environment (local hosts):
    set, it is the user's setting for every member and nothing is split. Fewer cores than ranks: nothing is set
    (the ranks cannot be disjoint), and the note says so."""
    kept = {s.member: s.own for s in seats if s.own}
    if inherited:
        return Binding(host, tuple(cores), {}, kept,
                       f"{VAR}={inherited} is set in forklift's environment: every member inherits it")
    taken = {c for s in seats if s.own for c in parse_ids(s.own)}
    pool = [c for c in sorted(set(cores)) if c not in taken]
    todo = [s for s in seats if not s.own]
    if not todo:
        return Binding(host, tuple(cores), {}, kept)
    if not cores:
        return Binding(host, (), {}, kept, f"{host}'s cores are unknown (a remote host): vLLM-CPU's autobind "
                       "may put the members on the same cores; set env.VLLM_CPU_OMP_THREADS_BIND per member")
    ranks = sum(s.ranks for s in todo)
    if len(pool) < ranks:
        return Binding(host, tuple(cores), {}, kept, f"{ranks} ranks on {len(pool)} free cores of {host}: they "
                       "cannot compute on cores of their own, so vLLM-CPU's autobind decides")
    each, extra = divmod(len(pool), ranks)
    binds: dict[str, str] = {}
    at = 0
    for s in todo:
        masks = []
        for _ in range(s.ranks):
            n = each + (1 if extra > 0 else 0)
            extra -= 1
            masks.append(id_list(pool[at:at + n]))
            at += n
        binds[s.member] = "|".join(masks)
    return Binding(host, tuple(cores), binds, kept)


def local_cores() -> list[int]:
    """The cores this process may run on (its affinity: a cgroup's or taskset's limit counts)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


CoresFn = Callable[[str, bool], list[int]]
"""(host, is_local) -> the host's core ids ([]: unknown)."""


def default_cores(host: str, is_local: bool) -> list[int]:
    return local_cores() if is_local else []


def inherited_bind(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return env.get(VAR) or None
