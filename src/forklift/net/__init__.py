"""``forklift net``: find the link each node pair really uses, prove its bandwidth, and derive NCCL's settings.

``check(target)`` gathers every node's interfaces, RDMA devices and GID tables and the NCCL library its vLLM would
load, finds the routes between nodes, reaches the head's ports, measures each pair (iperf3, ib_write_bw) and
returns a NetReport of facts, derived settings and verdicts. ``facts(target)`` is the same as plain data (doctor
reads it); ``apply`` writes the derived settings into the recipe or cluster file.
"""

from typing import Any

from forklift.net.check import NetReport, check
from forklift.net.derive import NodeSettings
from forklift.net.target import Target, load


def facts(target: Target, **kwargs: Any) -> dict[str, Any]:
    """``check(target)`` as JSON-ready plain data: nodes, routes, ports, bandwidth, derived settings, verdicts."""
    return check(target, **kwargs).to_json()


__all__ = ["NetReport", "NodeSettings", "Target", "check", "facts", "load"]
