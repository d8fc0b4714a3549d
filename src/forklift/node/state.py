"""The state file ``node apply`` writes on the node before its changes: what was there (file bytes with mode
and owner, sysctl values, swap, units), so ``node revert`` puts it back exactly."""

from __future__ import annotations

import base64
import time

from pydantic import BaseModel, Field

from forklift.node.facts import FileFact


class FileRecord(BaseModel):
    path: str
    existed: bool
    mode: str | None = None
    owner: str | None = None
    content_b64: str | None = None

    @classmethod
    def of(cls, fact: FileFact) -> FileRecord:
        b64 = base64.b64encode(fact.content).decode() if fact.content is not None else None
        return cls(path=fact.path, existed=fact.exists, mode=fact.mode, owner=fact.owner, content_b64=b64)


class SwapRecord(BaseModel):
    path: str
    created: bool
    activated: bool
    size_bytes: int | None = None
    """The size apply asked for (``--swap-gib``), so ``check`` compares against what was applied."""


class UnitRecord(BaseModel):
    name: str
    was_enabled: str
    was_active: str


class NodeState(BaseModel):
    """What apply changed and what was there before. Written before the changes it describes."""

    version: int = 1
    host: str
    root: str
    live: bool
    profile: str
    applied_at: float = Field(default_factory=time.time)
    files: list[FileRecord] = Field(default_factory=list)
    created_dirs: list[str] = Field(default_factory=list)
    sysctl: dict[str, str] = Field(default_factory=dict)
    swap: SwapRecord | None = None
    guard_unit: UnitRecord | None = None
    display_manager: UnitRecord | None = None
    logind_reloaded: bool = False
    """apply reloaded systemd-logind after writing its drop-in (revert reloads it again after removing it)."""

    def file(self, path: str) -> FileRecord | None:
        return next((f for f in self.files if f.path == path), None)
