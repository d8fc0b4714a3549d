"""The Launch: per-rank argv, env and start order. Pure data; ``render`` makes it, ``up`` runs it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Role = Literal["engine", "ray-head", "ray-worker"]


class RankLaunch(BaseModel):
    """One process to start on one host."""

    model_config = ConfigDict(frozen=True)

    rank: int
    node_index: int
    host: str
    argv: list[str]
    env: dict[str, str]
    headless: bool
    secret_env: dict[str, str] = {}
    """Env vars whose values are read from the *launching* environment at start (name -> source var).
    Never written to disk or shown."""
    role: Role = "engine"
    container: str | None = None
    """Docker runtime: the container's name (``docker rm -f`` target in ``down``)."""
    run_dir: str | None = None
    """Directory on the node for this run's logs and the copied launcher."""
    model_path: str | None = None
    """Where the weights are on this node (host path); None for a hub id read from the node's HF cache."""

    @property
    def log_name(self) -> str:
        return f"rank{self.rank}.log" if self.role == "engine" else f"{self.role}{self.rank}.log"


class NodePaths(BaseModel):
    """Where a run lives on one node (absolute paths on that node)."""

    model_config = ConfigDict(frozen=True)

    run_dir: str
    home: str


class Launch(BaseModel):
    """Every process in start order (Ray daemons, then workers, head last), plus how clients reach the head."""

    model_config = ConfigDict(frozen=True)

    ranks: list[RankLaunch]
    endpoint: str
    served_name: str
    model_path: str
    """The model argument the head's vLLM gets (a path, or a hub id)."""
    port: int
    runtime: str
    run_id: str | None = None
    ray: list[RankLaunch] = []
    """Ray mode: `ray start` per node (head first), started and registered before the engine."""
    ray_status_argv: list[str] | None = None
    """Ray mode: argv run on the head node that prints `ray status` (used to count registered nodes)."""

    @property
    def head(self) -> RankLaunch:
        return next(r for r in self.ranks if r.rank == 0)

    @property
    def processes(self) -> list[RankLaunch]:
        """Everything `up` starts, in order."""
        return [*self.ray, *self.ranks]
