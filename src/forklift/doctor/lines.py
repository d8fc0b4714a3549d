"""Reading logs with bounded memory: bytes in, clean text lines out.

Binary or huge files must not crash or exhaust memory: undecodable bytes are dropped, a line longer
than ``max_line`` is cut (the rest of it skipped), ANSI colour codes are removed and each
carriage-return segment of a progress bar becomes its own line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO

MAX_LINE = 8192
_CHUNK = 1 << 16
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\^\[\[[0-9;]*m")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clean(raw: str, max_line: int = MAX_LINE) -> list[str]:
    """One raw line to the lines it shows: ANSI removed, CR segments split, controls dropped, capped."""
    out = []
    for segment in _ANSI_RE.sub("", raw).split("\r"):
        text = _CONTROL_RE.sub("", segment).rstrip()
        if text:
            out.append(text[:max_line])
    return out


def iter_text(lines: Iterable[str], max_line: int = MAX_LINE) -> Iterator[str]:
    """Clean lines that are already text (each item may hold several lines)."""
    for item in lines:
        for raw in item.split("\n"):
            yield from clean(raw, max_line)


def iter_binary(stream: BinaryIO, max_line: int = MAX_LINE) -> Iterator[str]:
    """Stream a file of bytes as clean lines; memory stays near ``max_line`` plus one chunk."""
    buf = bytearray()
    skipping = False
    while True:
        chunk = stream.read(_CHUNK)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if not skipping:
                room = max_line * 4 - len(buf)  # bytes; a character is at most 4
                buf += piece[:room]
                if len(piece) > room:
                    skipping = True
            if nl < 0:
                break
            yield from clean(buf.decode("utf-8", errors="ignore"), max_line)
            buf.clear()
            skipping = False
            start = nl + 1
        if skipping and buf:
            yield from clean(buf.decode("utf-8", errors="ignore"), max_line)
            buf.clear()
    if buf:
        yield from clean(buf.decode("utf-8", errors="ignore"), max_line)
