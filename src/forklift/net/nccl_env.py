"""NCCL's list syntax for NCCL_SOCKET_IFNAME / NCCL_IB_HCA, and the environment a node's ranks will get.

NCCL (src/misc/utils.cc parseStringList / matchIf): a comma list of prefixes; a leading ``=`` makes every entry
exact, a leading ``^`` excludes instead; an entry may carry ``:port``. Matching is case-sensitive.
"""

from __future__ import annotations

from forklift.launch.flags import network_env, node_network_env
from forklift.recipe.schema import Recipe


def matches(spec: str, name: str) -> bool:
    """Whether NCCL would pick interface or HCA ``name`` under ``spec``."""
    text = spec.strip()
    exclude = text.startswith("^")
    text = text.lstrip("^")
    exact = text.startswith("=")
    text = text.lstrip("=")
    entries = [e.split(":")[0].strip() for e in text.split(",") if e.strip()]
    hit = any(name == e if exact else name.startswith(e) for e in entries)
    return not hit if exclude else hit


def rank_env(recipe: Recipe, index: int) -> dict[str, str]:
    """The NCCL/Gloo-relevant environment node ``index``'s ranks get (as ``forklift render`` builds it)."""
    node = recipe.nodes[index]
    return {**network_env(recipe), **recipe.env, **node_network_env(node), **node.env}
