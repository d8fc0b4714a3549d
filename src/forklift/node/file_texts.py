"""The text of the files ``node apply`` writes: the sysctl file, the guard's config, module and unit, the
logind drop-in, and fstab with the swap entry."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from typing import Any

from forklift.node import facts as F
from forklift.node.profile import GIB, NodeProfile


def sysctl_text(profile: NodeProfile) -> str:
    lines = [f"# Written by `forklift node apply` (profile {profile.name}); `forklift node revert` removes it."]
    lines += [f"{k} = {v}" for k, v in profile.sysctl.items()]
    return "\n".join(lines) + "\n"


def guard_config(profile: NodeProfile, *, runs_dirs: Sequence[str], node_names: Sequence[str]) -> dict[str, Any]:
    g = profile.guard
    return {
        "heartbeat": F.GUARD_HEARTBEAT, "runs_dirs": list(runs_dirs), "node_names": list(node_names),
        "oom_score_adj": g.oom_score_adj, "drop_metric": g.drop_metric, "drop_below_bytes": int(g.drop_below_gib * GIB),
        "drop_when": g.drop_when, "drop_mode": g.drop_mode, "cooldown_s": g.cooldown_s, "interval_s": g.interval_s,
    }


def guard_unit_text(python: str) -> str:
    return (
        "# Written by `forklift node apply`; `forklift node revert` removes it.\n"
        "[Unit]\n"
        "Description=forklift node guard (OOM protection by run-record PID, page-cache drop while loading)\n"
        "After=local-fs.target\n\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={python} {F.GUARD_MODULE} --config {F.GUARD_CONFIG}\n"
        "Restart=on-failure\n"
        "RestartSec=2\n"
        "OOMScoreAdjust=-1000\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def guard_module_text() -> str:
    return (resources.files("forklift.node") / "guard.py").read_text()


LOGIND_UNIT = "systemd-logind.service"


def logind_dropin_text() -> str:
    return ("# Written by `forklift node apply`; `forklift node revert` removes it.\n"
            "# RemoveIPC=yes deletes a user's semaphores and shared memory when the user's last session ends\n"
            "# (the SSH session that started a vLLM rank), and the rank dies.\n"
            "[Login]\n"
            "RemoveIPC=no\n")


def fstab_with_swap(fstab: str | None, path: str) -> str:
    text = fstab or ""
    if text and not text.endswith("\n"):
        text += "\n"
    return text + f"{path} none swap sw 0 0\n"
