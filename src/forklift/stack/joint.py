"""The joint plan: every member planned, then the shared nodes' memory split among them explicitly.

Per device (a GPU, or a CPU host) the members' fixed terms (weights, activation peak, non-torch, CUDA graphs, from
each member's own plan) are summed; members with ``kv_gib`` take that KV budget, the rest split what is left by
``share``. A member spanning several devices takes the smallest of its shares (one budget reaches its argv). The
budget reaches vLLM as ``serve.kv_cache_memory_bytes`` + ``serve.gpu_memory_utilization`` on GPUs and
``serve.cpu_kv_cache_gib`` (whole GiB, vLLM-CPU reads an integer) on CPU hosts; every member is planned again with
it. A device whose members' fixed terms plus the KV one max_model_len request needs exceed its usable memory
refuses the stack with the per-device table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.errors import StackDoesNotFitError
from forklift.hardware.profiles import is_unified
from forklift.plan.core import GIB
from forklift.plan.make import make
from forklift.plan.result import Plan, RankPlan
from forklift.recipe.deployment import Deployment, resolve
from forklift.stack.schema import Member, StackFile

UTILIZATION = 0.9
"""Share of a discrete GPU's (or a CPU host's) memory the members may use together: vLLM's own default."""
UNIFIED_UTILIZATION = 0.8
"""On unified memory the host's own processes share the pool: the members leave it a fifth."""


@dataclass(frozen=True)
class Use:
    """One member's rank on a device: its fixed terms, its KV budget and the KV one request needs (GiB)."""

    member: str
    fixed_gib: float
    kv_gib: float
    kv_needed_gib: float

    @property
    def total_gib(self) -> float:
        return self.fixed_gib + self.kv_gib


@dataclass(frozen=True)
class Device:
    host: str
    index: int
    """The device's place among a member's ranks on that host (GPU order; 0 for a CPU host)."""
    hardware: str
    total_gib: float
    usable_gib: float
    uses: tuple[Use, ...]

    @property
    def used_gib(self) -> float:
        return sum(u.total_gib for u in self.uses)

    @property
    def short_of(self) -> list[str]:
        """Why it does not fit (empty: it fits)."""
        out = []
        fixed = sum(u.fixed_gib for u in self.uses)
        needed = fixed + sum(u.kv_needed_gib for u in self.uses)
        if needed > self.usable_gib:
            out.append(f"fixed terms + one request each need {needed:.2f} GiB of {self.usable_gib:.2f} GiB usable")
        if self.used_gib > self.usable_gib + 1e-6:
            out.append(f"budgets sum to {self.used_gib:.2f} GiB of {self.usable_gib:.2f} GiB usable")
        out += [f"{u.member}: KV budget {u.kv_gib:.2f} GiB < {u.kv_needed_gib:.2f} GiB one request needs"
                for u in self.uses if u.kv_gib + 1e-6 < u.kv_needed_gib]
        return out

    @property
    def fits(self) -> bool:
        return not self.short_of

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "device": self.index, "hardware": self.hardware, "total_gib": self.total_gib,
                "usable_gib": round(self.usable_gib, 3), "used_gib": round(self.used_gib, 3), "fits": self.fits,
                "short_of": self.short_of,
                "members": [{"member": u.member, "fixed_gib": round(u.fixed_gib, 3), "kv_gib": round(u.kv_gib, 3),
                             "kv_needed_gib": round(u.kv_needed_gib, 3)} for u in self.uses]}


@dataclass(frozen=True)
class JointPlan:
    stack: StackFile
    devices: list[Device]
    sets: dict[str, list[str]]
    """Per member: the --set items that carry its budget (on top of its own)."""
    plans: dict[str, Plan] = field(default_factory=dict)
    """Per member, planned again with its budget, in start order (largest first). Empty when it does not fit."""

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)

    @property
    def order(self) -> list[str]:
        return list(self.plans)

    def table(self) -> str:
        """Per device, per member: fixed terms, KV budget, KV one request needs; then the sum against usable."""
        lines = [f"{'node':<18} {'dev':>3} {'member':<16} {'fixed GiB':>9} {'KV GiB':>7} {'need GiB':>8}"]
        for d in self.devices:
            for u in d.uses:
                lines.append(f"{d.host:<18} {d.index:>3} {u.member:<16} {u.fixed_gib:>9.2f} {u.kv_gib:>7.2f} "
                             f"{u.kv_needed_gib:>8.2f}")
            verdict = "fits" if d.fits else "DOES NOT FIT: " + "; ".join(d.short_of)
            lines.append(f"{d.host:<18} {d.index:>3} {'(sum)':<16} {d.used_gib:>9.2f} of {d.usable_gib:.2f} usable "
                         f"({d.total_gib:.2f} total): {verdict}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack.name, "fits": self.fits, "order": self.order, "sets": self.sets,
                "devices": [d.to_json() for d in self.devices],
                "members": {n: {"run": self.stack.run_name(n), "kv_tokens": p.kv_tokens, "fits": p.fits,
                                "endpoint_port": p.deployment.recipe.serve.port,
                                "served_name": p.deployment.recipe.served_name} for n, p in self.plans.items()}}


def recipe_ref(member: Member, base: Path) -> str:
    """A path relative to the stack file when one exists there, else the name as given (a bundled recipe)."""
    p = base / member.recipe
    return str(p) if p.is_file() else member.recipe


def member_overrides(member: Member) -> list[str]:
    out = list(member.set)
    if member.port is not None:
        out.append(f"serve.port={member.port}")
    if member.served_name is not None:
        out.append(f"model.served_name={member.served_name}")
    return out


def _fixed(r: RankPlan) -> float:
    return r.weights_gib + r.activation_gib + r.non_torch_gib + r.cudagraph_gib


def _keyed(plan: Plan) -> dict[tuple[str, int], RankPlan]:
    out: dict[tuple[str, int], RankPlan] = {}
    seen: dict[str, int] = {}
    for r in plan.ranks:
        i = 0 if r.hardware == "cpu" else seen.get(r.host, 0)
        seen[r.host] = i + 1
        out.setdefault((r.host, i), r)
    return out


def _usable(stack: StackFile, hardware: str, total: float) -> float:
    util = stack.utilization or (UNIFIED_UTILIZATION if is_unified(hardware) else UTILIZATION)
    return total * util


def budgets(stack: StackFile, plans: dict[str, Plan]) -> tuple[list[Device], dict[str, float]]:
    """The per-device table and each member's KV budget per rank (GiB), from the members' own plans."""
    keyed = {n: _keyed(p) for n, p in plans.items()}
    members = {m.name: m for m in stack.members}
    keys = sorted({k for ks in keyed.values() for k in ks})
    kv: dict[str, float] = {n: math.inf for n in plans}
    for key in keys:
        on = [n for n in plans if key in keyed[n]]
        first = keyed[on[0]][key]
        usable = _usable(stack, first.hardware, first.total_gib)
        fixed = sum(_fixed(keyed[n][key]) for n in on)
        explicit = sum(members[n].kv_gib or 0.0 for n in on)
        shares = sum(members[n].share for n in on if members[n].kv_gib is None)
        free = max(0.0, usable - fixed - explicit)
        for n in on:
            given = members[n].kv_gib
            mine = given if given is not None else free * members[n].share / shares
            kv[n] = min(kv[n], mine)
    for n, p in plans.items():
        if p.platform == "cpu":  # vLLM-CPU reads VLLM_CPU_KVCACHE_SPACE as whole GiB
            kv[n] = float(max(1, math.floor(kv[n] + 1e-9)))
    devices = []
    for key in keys:
        on = [n for n in plans if key in keyed[n]]
        first = keyed[on[0]][key]
        uses = tuple(Use(n, _fixed(keyed[n][key]), kv[n], keyed[n][key].kv_needed_gib) for n in on)
        devices.append(Device(key[0], key[1], first.hardware, first.total_gib,
                              _usable(stack, first.hardware, first.total_gib), uses))
    return devices, kv


def budget_sets(plan: Plan, kv_gib: float, device_fixed: float, total_gib: float) -> list[str]:
    """The --set items that give a member its budget."""
    if plan.platform == "cpu":
        return [f"serve.cpu_kv_cache_gib={int(kv_gib)}"]
    util = min(1.0, math.ceil((device_fixed + kv_gib) / total_gib * 1000) / 1000)
    return [f"serve.kv_cache_memory_bytes={int(kv_gib * GIB)}", f"serve.gpu_memory_utilization={util}"]


def _deployment(member: Member, base: Path, extra: list[str]) -> Deployment:
    return resolve(recipe_ref(member, base), [*member_overrides(member), *extra])


def joint_plan(stack: StackFile, base: Path, *, plans: dict[str, Plan] | None = None) -> JointPlan:
    """Plan every member, split the shared devices, plan each again with its budget. Raises StackDoesNotFitError
    with the per-device table when the members do not fit together. ``plans``: the members' own plans already
    made (tests), else each is planned from its recipe."""
    own = plans if plans is not None else {m.name: make(_deployment(m, base, [])) for m in stack.members}
    devices, kv = budgets(stack, own)
    sets = {}
    for n, p in own.items():
        mine = [d for d in devices if any(u.member == n for u in d.uses)]
        worst = max(mine, key=lambda d: next(u.fixed_gib for u in d.uses if u.member == n))
        fixed = next(u.fixed_gib for u in worst.uses if u.member == n)
        sets[n] = budget_sets(p, kv[n], fixed, worst.total_gib)
    joint = JointPlan(stack, devices, sets)
    if not joint.fits:
        bad = [f"{d.host}" + (f" device {d.index}" if d.hardware != "cpu" else "") for d in devices if not d.fits]
        raise StackDoesNotFitError(
            f"stack {stack.name}: the members do not fit together on {', '.join(bad)}", table=joint.table(),
            fix="Give a member less (kv_gib, serve.max_model_len, a smaller quantization), move one to other "
                "nodes, or raise `utilization` if the nodes run nothing else.")
    members = {m.name: m for m in stack.members}
    final = {n: make(_deployment(members[n], base, sets[n])) if plans is None
             else own[n] for n in own}
    order = sorted(final, key=lambda n: -sum(u.total_gib for d in devices for u in d.uses if u.member == n))
    return JointPlan(stack, devices, sets, {n: final[n] for n in order})
