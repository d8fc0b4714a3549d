"""The candidate before it starts: the recipe's patches against the candidate's vLLM, and whether it fits
beside the baseline.

Patch check: when the change touches the runtime (another venv's Python, another image), every patch the
recipe names is checked against the candidate's vLLM files: a venv's installed tree read through the head's
Runner, an image's release by its version (``forklift patch check --against vllm==X``, the sdist fetched once).
Nothing is written. A patch that drifted, lost its target or is out of its version range stops the canary
before the baseline is touched.

Beside: both deployments' planned footprints per node (GPU and unified memory: per device,
``gpu_memory_utilization`` x total as vLLM claims it; CPU: weights, activations, non-torch and the KV pool) must
fit together.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from forklift import patches
from forklift.cluster.pins import probe_build
from forklift.launch.render import python_for
from forklift.plan import Plan, Unplanned
from forklift.recipe.schema import Recipe, VenvRuntime
from forklift.runner import Runner

BAD_STATES = ("drift", "vanished", "modified")
GPU_SHARE_LIMIT = 0.98
"""Both claims together may use at most this share of a device (vLLM refuses more than is free)."""
HOST_SHARE_LIMIT = 0.90
"""CPU: both footprints together within this share of the node's memory."""


@dataclass(frozen=True)
class PatchCheck:
    against: str
    """What was checked: 'installed vLLM 0.31.0 at /path' or 'release 0.31.0'."""
    results: list[dict[str, Any]]
    """Per patch: id, status, in_range, problems."""

    @property
    def broken(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r["status"] in BAD_STATES or r["in_range"] is False]

    def to_json(self) -> dict[str, Any]:
        return {"against": self.against, "results": self.results, "ok": not self.broken}


def runtime_changed(base: Recipe, cand: Recipe) -> bool:
    return base.runtime != cand.runtime


def patch_check(cand: Recipe, head: Runner) -> PatchCheck | None:
    """The candidate recipe's patches against the candidate's vLLM; None when it names no patches."""
    if not cand.patches:
        return None
    wanted = patches.get(list(cand.patch_ids))
    if isinstance(cand.runtime, VenvRuntime):
        tree = patches.open_tree(head, python_for(cand))
        label = f"installed vLLM {tree.version} ({python_for(cand)} on {head.host})"
        report = patches.check_releases([], wanted, extra={label: tree})
    else:
        build = probe_build(cand, head)
        version = (build.version if build else None) or ""
        label = f"release {version.split('+')[0]}"
        report = patches.check_releases([version.split("+")[0]], wanted)
    name = report.versions[0]
    results = []
    for p in wanted:
        st = report.cells[(p.id, name)]
        problems = [q for f in st.files for q in f.problems]
        results.append({"id": p.id, "status": st.status, "in_range": st.in_range, "range": p.vllm,
                        "problems": problems})
    return PatchCheck(label, results)


def _footprints(plan: Plan) -> dict[tuple[str, int], tuple[float, float]]:
    """(host, device index on that host) -> (GiB this deployment takes, GiB the device/host has)."""
    seen: dict[str, int] = defaultdict(int)
    out: dict[tuple[str, int], tuple[float, float]] = {}
    for r in sorted(plan.ranks, key=lambda r: r.rank):
        if plan.platform == "cuda":  # vLLM claims gpu_memory_utilization x total, unified memory included
            key, used = (r.host, seen[r.host]), r.requested_gib
        else:  # CPU: one pool per host
            key, used = (r.host, 0), r.weights_gib + r.activation_gib + r.non_torch_gib + r.kv_pool_gib
        seen[r.host] += 1
        before = out.get(key, (0.0, r.total_gib))
        out[key] = (before[0] + used, max(before[1], r.total_gib))
    return out


def fits_beside(base: Plan | Unplanned, cand: Plan | Unplanned) -> tuple[bool, str]:
    """Whether the plans say both deployments fit on their nodes at once, and why (not)."""
    if not isinstance(base, Plan) or not isinstance(cand, Plan):
        which = "baseline" if not isinstance(base, Plan) else "candidate"
        return False, f"the {which} has no plan (its memory is unknown), so the plan cannot say both fit"
    if not cand.fits:
        return False, f"the candidate's plan does not fit on its own: {cand.error}"
    a, b = _footprints(base), _footprints(cand)
    limit = GPU_SHARE_LIMIT if base.platform == "cuda" else HOST_SHARE_LIMIT
    tight = []
    for key in sorted(set(a) & set(b)):
        used = a[key][0] + b[key][0]
        total = max(a[key][1], b[key][1])
        if used > limit * total:
            where = key[0] if base.platform != "cuda" else f"{key[0]} device {key[1]}"
            tight.append(f"{where}: {a[key][0]:.1f} + {b[key][0]:.1f} GiB > {100 * limit:g}% of {total:.1f} GiB")
    if tight:
        return False, "both do not fit: " + "; ".join(tight)
    return True, "both fit by the plans"
