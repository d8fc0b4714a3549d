"""The joint plan: every member planned, then the shared nodes' memory split among them explicitly.

Per device (a GPU, or a CPU host) the members' fixed terms (weights, activation peak, non-torch, CUDA graphs, from
each member's own plan) are summed; members with ``kv_gib`` take that KV budget, the rest split what is left by
``share``. A member spanning several devices takes the smallest of its shares (one budget reaches its argv). The
budget reaches vLLM as ``serve.kv_cache_memory_bytes`` + ``serve.gpu_memory_utilization`` on GPUs and
``serve.cpu_kv_cache_gib`` (whole GiB, vLLM-CPU reads an integer) on CPU hosts; every member is planned again with
it. What the members may use together: 0.9 of a discrete GPU (vLLM's default), 0.8 of a CPU host, and on a
unified-memory GPU (GB10) vLLM's own free reading at startup from the planner's GB10 terms (:func:`unified_usable`);
``utilization`` in STACK.yaml overrides all three. GPUs are keyed by their index on the host (the recipe's
CUDA_VISIBLE_DEVICES when it names them). The cores of a CPU host two members share are split too (stack/cores.py).
A device whose members' fixed terms plus the KV one max_model_len request needs exceed its usable memory refuses
the stack with the per-device table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.errors import RecipeError, StackDoesNotFitError
from forklift.hardware.profiles import get as hardware_profile
from forklift.plan import gb10
from forklift.plan.core import GIB
from forklift.plan.make import make
from forklift.plan.result import Plan, RankPlan
from forklift.recipe.deployment import Deployment, resolve
from forklift.stack import cores as cpu_cores
from forklift.stack.schema import Member, StackFile

UTILIZATION = 0.9
"""Share of a discrete GPU's (or a CPU host's) memory the members may use together: vLLM's own default."""
CPU_UTILIZATION = 0.8
"""A vLLM-CPU host's own processes share its memory: the members leave it a fifth."""


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
    """The GPU's index on that host: CUDA_VISIBLE_DEVICES of the member's node where the recipe names devices,
    else the rank's place among the member's ranks there (0 for a CPU host)."""
    hardware: str
    total_gib: float
    usable_gib: float
    uses: tuple[Use, ...]
    usable_from: str = ""
    """How ``usable_gib`` was reached (a share of the total, or the unified-memory terms)."""

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
                "usable_gib": round(self.usable_gib, 3), "usable_from": self.usable_from,
                "used_gib": round(self.used_gib, 3), "fits": self.fits,
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
    bindings: list[cpu_cores.Binding] = field(default_factory=list)
    """Per shared CPU host: the cores each member's ranks compute on (stack/cores.py)."""

    @property
    def notes(self) -> list[str]:
        return [b.note for b in self.bindings if b.note]

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
            if d.usable_from:
                lines.append(f"{d.host:<18} {d.index:>3} {'(usable)':<16} {d.usable_from}")
        for b in self.bindings:
            given = [f"{m} {v}" for m, v in b.binds.items()] + [f"{m} {v} (its own)" for m, v in b.kept.items()]
            if given:
                lines.append(f"cores on {b.host} ({cpu_cores.VAR}): {'; '.join(given)}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack.name, "fits": self.fits, "order": self.order, "sets": self.sets,
                "cpu_binds": {m: v for b in self.bindings for m, v in b.binds.items()}, "notes": self.notes,
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


def visible_devices(plan: Plan, host: str) -> list[int] | None:
    """The GPU indices a member's node on ``host`` names (CUDA_VISIBLE_DEVICES: its node env over the recipe's);
    None when it names none (or names them by UUID)."""
    recipe = plan.deployment.recipe
    node = next((n for n in recipe.nodes if n.host == host), None)
    value = {**recipe.env, **(node.env if node is not None else {})}.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    return [int(p) for p in parts] if parts and all(p.isdigit() for p in parts) else None


def _keyed(plan: Plan) -> dict[tuple[str, int], RankPlan]:
    """(host, GPU index) -> the member's rank there; a CPU host is one device (index 0)."""
    out: dict[tuple[str, int], RankPlan] = {}
    seen: dict[str, int] = {}
    for r in plan.ranks:
        i = 0 if r.hardware == "cpu" else seen.get(r.host, 0)
        seen[r.host] = i + 1
        named = visible_devices(plan, r.host) if r.hardware != "cpu" else None
        index = named[i] if named is not None and i < len(named) else i
        out.setdefault((r.host, index), r)
    return out


@dataclass(frozen=True)
class Usable:
    gib: float
    why: str


def unified_usable(plan: Plan, host: str, hardware: str, members: int) -> Usable:
    """What the members on one unified-memory GPU (GB10) may hold together: vLLM's free reading at the init
    snapshot (the node's measured MemAvailable less what precedes the reading, else the median clean GB10 reading
    less the node profile's watermark reserve: plan/gb10.py), less one CUDA context and communicators
    (``pre_snapshot_gib``) per other member, since each member is a process of its own that takes them before the
    next one reads, and less the KV pool's spread across boots (``pool_band_gib``): the last member to start reads
    what the others left, and its utilization (rounded up to 0.001) must not exceed it."""
    g = gb10.terms_for(plan.vllm_version)
    measured = plan.deployment.facts.get(host)
    if measured is not None and measured.mem_available_gib:
        free = measured.mem_available_gib - g.pre_snapshot_gib
        why = f"measured MemAvailable {measured.mem_available_gib:.2f} - {g.pre_snapshot_gib:.2f} before the read"
    else:
        profile = hardware_profile(hardware)
        sysctl = gb10.node_profile_sysctl(profile.node_profile) if profile.node_profile else {}
        reserve = gb10.watermark_cost(sysctl).reserve
        free = g.free_at_init.median - reserve
        why = f"free at init {g.free_at_init.median:.2f} (median of clean GB10 nodes) - {reserve:.2f} watermark reserve"
    others = max(0, members - 1)
    if others:
        why += f" - {others} x {g.pre_snapshot_gib:.2f} CUDA context of the other member(s)"
    why += f" - {g.pool_band_gib:.2f} spread across boots"
    return Usable(free - others * g.pre_snapshot_gib - g.pool_band_gib, why)


def _usable(stack: StackFile, plan: Plan, host: str, hardware: str, total: float, members: int) -> Usable:
    if stack.utilization:
        return Usable(total * stack.utilization, f"utilization {stack.utilization:g} of {total:.2f}")
    if plan.platform == "cpu":
        return Usable(total * CPU_UTILIZATION, f"{CPU_UTILIZATION:g} of {total:.2f} (the host keeps the rest)")
    profile = hardware_profile(hardware)
    if profile.unified:
        return unified_usable(plan, host, hardware, members)
    return Usable(total * UTILIZATION, f"{UTILIZATION:g} of {total:.2f} (vLLM's default)")


def budgets(stack: StackFile, plans: dict[str, Plan]) -> tuple[list[Device], dict[str, float]]:
    """The per-device table and each member's KV budget per rank (GiB), from the members' own plans."""
    keyed = {n: _keyed(p) for n, p in plans.items()}
    members = {m.name: m for m in stack.members}
    keys = sorted({k for ks in keyed.values() for k in ks})
    kv: dict[str, float] = {n: math.inf for n in plans}
    usable: dict[tuple[str, int], Usable] = {}
    for key in keys:
        on = [n for n in plans if key in keyed[n]]
        first = keyed[on[0]][key]
        usable[key] = _usable(stack, plans[on[0]], key[0], first.hardware, first.total_gib, len(on))
        fixed = sum(_fixed(keyed[n][key]) for n in on)
        explicit = sum(members[n].kv_gib or 0.0 for n in on)
        shares = sum(members[n].share for n in on if members[n].kv_gib is None)
        free = max(0.0, usable[key].gib - fixed - explicit)
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
        devices.append(Device(key[0], key[1], first.hardware, first.total_gib, usable[key].gib, uses,
                              usable[key].why))
    return devices, kv


def budget_sets(plan: Plan, kv_gib: float, device_fixed: float, total_gib: float) -> list[str]:
    """The --set items that give a member its budget."""
    if plan.platform == "cpu":
        return [f"serve.cpu_kv_cache_gib={int(kv_gib)}"]
    util = min(1.0, math.ceil((device_fixed + kv_gib) / total_gib * 1000) / 1000)
    return [f"serve.kv_cache_memory_bytes={int(kv_gib * GIB)}", f"serve.gpu_memory_utilization={util}"]


def _start_order(devices: list[Device], names: list[str]) -> list[str]:
    """Largest total budget first (a tie keeps the file order)."""
    return sorted(names, key=lambda n: -sum(u.total_gib for d in devices for u in d.uses if u.member == n))


def bindings(plans: dict[str, Plan], order: list[str], *, cores: cpu_cores.CoresFn = cpu_cores.default_cores,
             environ: Mapping[str, str] | None = None) -> list[cpu_cores.Binding]:
    """The cores of every CPU host that two or more vLLM-CPU members share, split among their ranks (members
    whose ranks span several hosts keep vLLM's autobind: one recipe-wide value cannot fit every host)."""
    inherited = cpu_cores.inherited_bind(environ)
    seats: dict[str, list[cpu_cores.Seat]] = {}
    local: dict[str, bool] = {}
    for n in order:
        p = plans[n]
        hosts = sorted({r.host for r in p.ranks})
        if p.platform != "cpu" or len(hosts) != 1:
            continue
        recipe = p.deployment.recipe
        node = next((x for x in recipe.nodes if x.host == hosts[0]), recipe.nodes[0])
        own = {**recipe.env, **node.env}.get(cpu_cores.VAR)
        seats.setdefault(hosts[0], []).append(cpu_cores.Seat(n, len(p.ranks), own))
        local[hosts[0]] = node.is_local
    return [cpu_cores.split(h, cores(h, local[h]), s, inherited=inherited if local[h] else None)
            for h, s in seats.items() if len(s) > 1]


def _deployment(member: Member, base: Path, extra: list[str]) -> Deployment:
    return resolve(recipe_ref(member, base), [*member_overrides(member), *extra])


def _ports_apart(stack: StackFile, own: Mapping[str, Plan]) -> None:
    """Two members whose heads share a host cannot both serve on one port (the second start would fail on it)."""
    seen: dict[tuple[str, int], str] = {}
    for name, p in own.items():
        recipe = p.deployment.recipe
        where = (recipe.head.ssh or recipe.head.host, recipe.serve.port)
        if where in seen:
            raise RecipeError(f"stack {stack.name}: members {seen[where]} and {name} both serve on port {where[1]} "
                              f"of {recipe.head.host}", source=stack.name,
                              fix=f"Give each member its own `port:` in the stack file (e.g. {name}: port: "
                                  f"{where[1] + 1}).")
        seen[where] = name


def joint_plan(stack: StackFile, base: Path, *, plans: dict[str, Plan] | None = None,
               cores: cpu_cores.CoresFn = cpu_cores.default_cores, environ: Mapping[str, str] | None = None,
               ) -> JointPlan:
    """Plan every member, split the shared devices (memory, and the cores of a shared CPU host), plan each again
    with its budget. Raises StackDoesNotFitError with the per-device table when the members do not fit together.
    ``plans``: the members' own plans already made (tests), else each is planned from its recipe; ``cores`` and
    ``environ``: a host's core ids and forklift's environment (tests)."""
    own = plans if plans is not None else {m.name: make(_deployment(m, base, [])) for m in stack.members}
    _ports_apart(stack, own)
    devices, kv = budgets(stack, own)
    sets = {}
    for n, p in own.items():
        mine = [d for d in devices if any(u.member == n for u in d.uses)]
        worst = max(mine, key=lambda d: next(u.fixed_gib for u in d.uses if u.member == n))
        fixed = next(u.fixed_gib for u in worst.uses if u.member == n)
        sets[n] = budget_sets(p, kv[n], fixed, worst.total_gib)
    order = _start_order(devices, list(own))
    bound = bindings(own, order, cores=cores, environ=environ)
    for b in bound:
        for n, value in b.binds.items():
            sets[n].append(f"env.{cpu_cores.VAR}={value}")
    joint = JointPlan(stack, devices, sets, bindings=bound)
    if not joint.fits:
        bad = [f"{d.host}" + (f" device {d.index}" if d.hardware != "cpu" else "") for d in devices if not d.fits]
        raise StackDoesNotFitError(
            f"stack {stack.name}: the members do not fit together on {', '.join(bad)}", table=joint.table(),
            fix="Give a member less (kv_gib, serve.max_model_len, a smaller quantization), move one to other "
                "nodes, or raise `utilization` if the nodes run nothing else.")
    members = {m.name: m for m in stack.members}
    final = {n: make(_deployment(members[n], base, sets[n])) if plans is None
             else own[n] for n in own}
    return JointPlan(stack, devices, sets, {n: final[n] for n in order}, bound)
