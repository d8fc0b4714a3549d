"""Exact weight bytes from safetensors headers (8-byte length + JSON header per shard; no weights read)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from forklift.errors import ModelError

_DTYPE_BYTES = {"BF16": 2.0, "F16": 2.0, "F32": 4.0, "F64": 8.0, "F8_E4M3": 1.0, "F8_E5M2": 1.0, "F8_E8M0": 1.0,
                "U8": 1.0, "I8": 1.0, "I16": 2.0, "I32": 4.0, "I64": 8.0, "BOOL": 1.0, "U32": 4.0, "F4": 0.5}


class StoredTensor(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    nbytes: int


def read_headers(model_dir: Path) -> list[StoredTensor]:
    """Every tensor of every ``*.safetensors`` shard in ``model_dir`` (empty when there are none)."""
    out: list[StoredTensor] = []
    for shard in sorted(model_dir.glob("*.safetensors")):
        try:
            with shard.open("rb") as fh:
                (length,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(length))
        except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelError(f"{shard}: unreadable safetensors header: {exc}",
                             fix="Re-download the shard, or plan with model.load_format: dummy.") from exc
        for name, meta in header.items():
            if name == "__metadata__" or not isinstance(meta, dict):
                continue
            start, end = meta.get("data_offsets", (0, 0))
            out.append(StoredTensor(name=name, nbytes=int(end) - int(start)))
    return out
