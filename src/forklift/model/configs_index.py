"""Configs bundled with forklift for planning models whose weights are not on this machine (data)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

from forklift.yamlio import load_data


class BundledConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    file: str
    aliases: tuple[str, ...] = ()
    note: str = ""


@cache
def bundled_configs() -> dict[str, BundledConfig]:
    text = (resources.files("forklift.model") / "configs" / "index.yaml").read_text()
    raw: dict[str, dict[str, Any]] = load_data(text)
    return {name: BundledConfig(name=name, **entry) for name, entry in raw.items()}


def find(ref: str) -> BundledConfig | None:
    """A bundled config by its name, one of its aliases (HF id or folder name), or a path's last part."""
    configs = bundled_configs()
    if ref in configs:
        return configs[ref]
    tail = ref.rstrip("/").split("/")[-1]
    lowered = {ref.lower(), tail.lower()}
    for entry in configs.values():
        if any(a.lower() in lowered for a in entry.aliases):
            return entry
    return None


def read(entry: BundledConfig) -> str:
    return (resources.files("forklift.model") / "configs" / entry.file).read_text()
