"""A node's host stack (kernel, NVIDIA driver, CUDA, NCCL, NIC firmware, OS release), how it drifts across nodes,
and which of its versions are known to break (``known_bad.yaml``: each entry with the public threads that
established it and its fix).

Pure functions over ``HostFacts``: preflight warns with them, the run record pins the stack, ``status --pins``
shows it.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from forklift.errors import HardwareError
from forklift.host.facts import HostFacts
from forklift.results import CheckResult
from forklift.yamlio import load_data

Fact = Literal["kernel", "driver", "cuda", "nccl", "nic_firmware", "os"]
FACTS: tuple[Fact, ...] = ("kernel", "driver", "cuda", "nccl", "nic_firmware", "os")
LABELS: dict[str, str] = {"kernel": "kernel", "driver": "NVIDIA driver", "cuda": "CUDA (driver)", "nccl": "NCCL",
                          "nic_firmware": "NIC firmware", "os": "OS release"}


def stack_of(facts: HostFacts) -> dict[str, str]:
    """The facts of the stack this node reported, in ``FACTS`` order (one it could not read is left out)."""
    nccl = facts.nccl_version or facts.nccl
    nic = ", ".join(f"{dev} {fw}" for dev, fw in (facts.nic_firmware or {}).items())
    values = {"kernel": facts.kernel, "driver": facts.driver, "cuda": facts.cuda, "nccl": nccl,
              "nic_firmware": nic or None, "os": facts.os_release}
    return {k: v for k, v in values.items() if v}


def _comparable(fact: str, value: str) -> str:
    """What must agree across nodes: NIC firmware versions whatever the devices are called."""
    if fact == "nic_firmware":
        return ", ".join(sorted({part.rsplit(" ", 1)[-1] for part in value.split(", ")}))
    return value


def drift(stacks: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Fact -> {host: value} for every fact two nodes report differently (nodes that could not read it are
    left out of that fact)."""
    out: dict[str, dict[str, str]] = {}
    for fact in FACTS:
        values = {host: stack[fact] for host, stack in stacks.items() if fact in stack}
        if len({_comparable(fact, v) for v in values.values()}) > 1:
            out[fact] = values
    return out


def version_key(text: str) -> tuple[int, ...]:
    """The numbers of a version as a tuple (``6.17.0-1008-nvidia`` -> (6, 17, 0, 1008))."""
    return tuple(int(n) for n in re.findall(r"\d+", text))


class KnownBad(BaseModel):
    """One host-stack version known to break serving, with the threads that established it and its fix."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    fact: Fact
    versions: tuple[str, ...] = ()
    """Shell-style patterns of the fact's value (``7.0.0-1019-nvidia``, ``560.*``)."""
    since: str | None = None
    below: str | None = None
    """A version range instead: ``since`` <= version < ``below`` (either end may be open)."""
    when: str = ""
    """Where it bites, in words (the hardware, the transport)."""
    breaks: str
    fix: str
    threads: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_way_to_match(self) -> KnownBad:
        if bool(self.versions) == bool(self.since or self.below):
            raise ValueError(f"{self.id}: give either versions or a since/below range")
        return self

    def matches(self, value: str) -> bool:
        if self.versions:
            return any(fnmatch.fnmatchcase(value, pattern) for pattern in self.versions)
        key = version_key(value)
        return bool(key) and (self.since is None or key >= version_key(self.since)) and \
            (self.below is None or key < version_key(self.below))


@dataclass(frozen=True)
class Hit:
    """A node's fact matched by a known-bad entry."""

    host: str
    value: str
    entry: KnownBad


@functools.cache
def known_bad_table() -> tuple[KnownBad, ...]:
    """The bundled table (host/known_bad.yaml), read once."""
    text = (resources.files("forklift.host") / "known_bad.yaml").read_text()
    try:
        return tuple(KnownBad.model_validate(e) for e in load_data(text) or ())
    except ValidationError as exc:
        raise HardwareError(f"host/known_bad.yaml: {exc}", fix="Fix that entry of known_bad.yaml.") from exc


def known_bad(stacks: Mapping[str, Mapping[str, str]], table: Sequence[KnownBad] | None = None) -> list[Hit]:
    """Every node's fact a known-bad entry matches. NIC firmware is matched per device."""
    hits: list[Hit] = []
    for host, stack in stacks.items():
        for entry in known_bad_table() if table is None else table:
            value = stack.get(entry.fact)
            if value is None:
                continue
            candidates = [p.rsplit(" ", 1)[-1] for p in value.split(", ")] if entry.fact == "nic_firmware" \
                else [value]
            hits.extend(Hit(host, v, entry) for v in candidates if entry.matches(v))
    return hits


def describe(stack: Mapping[str, str]) -> str:
    """``kernel 6.8.0-45-generic, NVIDIA driver 570.86.15, ...`` (what the node reported)."""
    return ", ".join(f"{LABELS[f]} {stack[f]}" for f in FACTS if f in stack) or "nothing readable"


def stack_checks(stacks: Mapping[str, Mapping[str, str]], head: str,
                 table: Sequence[KnownBad] | None = None) -> list[CheckResult]:
    """Preflight's verdicts on the nodes' host stacks: a warning per fact that differs across nodes (naming the
    nodes that differ from the head) and per known-bad version a node runs (with the threads and the fix); an ok
    line per node whose stack raised neither."""
    out: list[CheckResult] = []
    flagged: set[str] = set()
    for fact, values in drift(stacks).items():
        ref = values.get(head) or next(iter(values.values()))
        odd = {h: v for h, v in values.items() if _comparable(fact, v) != _comparable(fact, ref)}
        flagged.update(odd)
        listed = "; ".join(f"{h} has {v}" for h, v in values.items())
        for host, value in odd.items():
            out.append(CheckResult("host stack", "warn", f"{LABELS[fact]} differs across nodes: {listed}",
                                   details={"fact": fact, "values": dict(values)}, host=host,
                                   fix=f"Run the same {LABELS[fact]} on every node ({value} on {host}, {ref} on "
                                   f"the others) before a collective fails on one of them."))
    for hit in known_bad(stacks, table):
        e = hit.entry
        flagged.add(hit.host)
        where = f" ({e.when})" if e.when else ""
        out.append(CheckResult("known-bad host stack", "warn",
                               f"{LABELS[e.fact]} {hit.value} on {hit.host} is known to break{where}: {e.breaks}",
                               details={"id": e.id, "fact": e.fact, "value": hit.value, "threads": list(e.threads)},
                               host=hit.host, fix=f"{e.fix}. Established in: {' '.join(e.threads)}"))
    out.extend(CheckResult("host stack", "ok", describe(stack), host=host)
               for host, stack in stacks.items() if host not in flagged)
    return out
