"""The Launch: per-rank argv, env and start order. Pure data; ``render`` makes it, ``up`` runs it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


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


class Launch(BaseModel):
    """Every rank in start order (workers first, head last), plus how clients reach the head."""

    model_config = ConfigDict(frozen=True)

    ranks: list[RankLaunch]
    endpoint: str
    served_name: str
    model_path: str
    port: int
    runtime: str

    @property
    def head(self) -> RankLaunch:
        return next(r for r in self.ranks if r.rank == 0)
