"""Helpers for tests that run the real CLI and real engines."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forklift.launch.launch_spec import Launch, NodePaths
    from forklift.recipe.schema import Recipe

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
CALIBRATION = DATA / "calibration"
"""Real vLLM startup logs and configs (tests/data/calibration/README.md says where they come from)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pid_running(pid: int) -> bool:
    """The process exists and is not a zombie, read from /proc (independent of forklift's own check)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def forklift(*args: str, home: Path | None = None, timeout: float = 900, env: dict[str, str] | None = None,
             unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run the real `forklift` CLI as a subprocess (``unset``: variables of this process it does not get)."""
    full_env = {k: v for k, v in os.environ.items() if k not in unset}
    if home is not None:
        full_env["FORKLIFT_HOME"] = str(home)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "forklift.cli.main", *args],
        capture_output=True, text=True, timeout=timeout, env=full_env, check=False,
    )


def launch_of(recipe: Recipe | str, model_path: str | None = None, *, run_id: str = "RUNID",
              node_paths: Mapping[int, NodePaths] | None = None) -> Launch:
    """render(plan) of a Recipe (or a bundled name), with the weights at ``model_path`` on every node; the plan
    is forced, so layouts the planner would refuse still render (tests of render itself)."""
    from forklift import recipe as recipes
    from forklift.launch.render import render
    from forklift.plan import for_launch
    from forklift.recipe.schema import Recipe

    r = recipe if isinstance(recipe, Recipe) else recipes.load(recipe)
    if model_path is not None:
        r = r.model_copy(update={"model": r.model.model_copy(update={"path": model_path})})
    return render(for_launch(r, force=True), run_id=run_id, node_paths=node_paths)
