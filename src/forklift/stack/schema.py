"""STACK.yaml: several recipes served side by side on shared nodes, each under its own run name and port."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,30}$")


def checked_name(v: str) -> str:
    if not _NAME.fullmatch(v):
        raise ValueError("use letters, digits, '.', '_' or '-', starting with a letter or digit (max 31)")
    return v


Name = Annotated[str, AfterValidator(checked_name)]
"""A stack's or a member's name (it becomes part of run names)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Member(_Strict):
    """One model of the stack: a recipe (bundled name or a path relative to STACK.yaml), its port and overrides."""

    name: Name = Field(description="The member's name; its run is named `<stack>-<name>`.")
    recipe: str = Field(description="Bundled recipe name or a path relative to the stack file.")
    port: int | None = Field(default=None, ge=1, le=65535, description="serve.port (null: the recipe's).")
    served_name: str | None = Field(default=None, description="model.served_name (null: the recipe's).")
    set: list[str] = Field(default_factory=list, description="--set overrides for this member only.")
    kv_gib: float | None = Field(default=None, gt=0, description="This member's KV budget per rank in GiB "
                                 "(null: a share of what the joint plan leaves free).")
    share: float = Field(default=1.0, gt=0, description="Weight of this member in splitting the free memory "
                         "among the members without kv_gib.")


class StackFile(_Strict):
    """What STACK.yaml holds."""

    name: Name = Field(description="The stack's name (its members run as `<name>-<member>`).")
    utilization: float | None = Field(default=None, gt=0, le=1, description="Share of each node's memory the "
                                      "members may use together (null: 0.9 of a GPU, 0.8 of a CPU host, and "
                                      "on a unified-memory GPU (GB10) vLLM's startup free reading from the "
                                      "planner's GB10 terms).")
    members: list[Member] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> StackFile:
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError(f"member names repeat: {sorted({n for n in names if names.count(n) > 1})}")
        ports = [m.port for m in self.members if m.port is not None]
        if len(set(ports)) != len(ports):
            raise ValueError(f"ports repeat: {sorted({p for p in ports if ports.count(p) > 1})}")
        return self

    def run_name(self, member: str) -> str:
        return f"{self.name}-{member}"
