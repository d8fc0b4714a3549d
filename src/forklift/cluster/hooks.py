"""What ``up`` asks of the planner, the patch engine and doctor, in one place.

Each is a plain call into a lower layer (plan, patches) or the pure matcher (doctor), so ``up``
stays a sequence of steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from forklift.errors import DoesNotFitError, ForkliftError, PatchError, PlanError
from forklift.launch.render import python_for
from forklift.recipe.schema import Recipe
from forklift.runner import Runner
from forklift.runner.fanout import fan_out


def plan_for(recipe: Recipe, vllm_version: str | None, *, force: bool) -> dict[str, Any]:
    """The plan embedded in the run record. Refuses a deployment the planner says cannot start,
    unless ``force``: that is the ten-minute load that ends in "0.16 GiB KV available"."""
    from forklift.plan import make

    version = vllm_version.split("+")[0] if vllm_version else None
    try:
        plan = make(recipe, vllm_version=version)
    except PlanError as exc:  # a layout vLLM itself rejects at startup (tp vs heads, pp vs layers, ...)
        if not force:
            raise DoesNotFitError(f"the plan says this will not start: {exc}",
                                  fix=(exc.fix + " " if exc.fix else "") + "Or pass --force to start anyway.") from exc
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    except ForkliftError as exc:  # the plan is advice here; a model the planner cannot describe still starts
        return {"available": False, "error": f"{type(exc).__name__}: {exc}"}
    data: dict[str, Any] = plan.to_json()
    if not plan.fits and not force:
        first = plan.advice[0] if plan.advice else None
        lead = f"{first.action} (--set {' --set '.join(first.set)}): {first.effect}. " if first else ""
        fix = lead + f"See `forklift plan {recipe.name or ''}` for every option, or pass --force to start anyway."
        raise DoesNotFitError(f"the plan says this will not start: {plan.error}", fix=fix)
    return data


def apply_patches(recipe: Recipe, runners: Mapping[int, Runner]) -> list[dict[str, Any]]:
    """Apply and verify the recipe's patches on every node (venv runtime) before any rank starts."""
    if not recipe.patches:
        return []
    if recipe.runtime.kind != "venv":
        raise PatchError(
            "patches with the docker runtime are applied by the container's entrypoint, not by `up`",
            fix="Build the image with `forklift patch entrypoint " + " ".join(recipe.patches) + "` as its "
                "entrypoint, or use runtime.kind: venv.",
        )
    from forklift.patches import apply_for_recipe

    python = python_for(recipe)
    done = fan_out(runners.items(), lambda r: apply_for_recipe(r, python, recipe.patches))
    for idx, exc in done.errors.items():
        if isinstance(exc, ForkliftError):
            raise exc
        raise PatchError(f"{recipe.nodes[idx].host}: applying patches failed: {exc}")
    out: list[dict[str, Any]] = []
    for idx in sorted(done.results):
        out += [p.to_json() for p in done.results[idx]]
    return out


def diagnosis(lines: Sequence[str], vllm_version: str | None) -> str | None:
    """doctor's top finding for a failed start, as one line: title and fix."""
    from forklift.doctor import diagnose

    findings = [f for f in diagnose(lines, vllm_version=vllm_version) if f.severity != "info"]
    if not findings:
        return None
    top = findings[0]
    return f"{top.title} ({top.category}): {top.fix}"
