"""Reading an input in one linear pass: bytes in, the lines worth matching out.

A log of any size is read in chunks. The first ``HEAD_LINES`` lines are all kept (the version banner,
arguments and, for a short log or a pasted report, everything). After that only lines holding one of
``TRIGGERS`` are kept: each trigger is found with ``bytes.find`` over the lower-cased chunk (C speed),
so a plain log costs a few passes of memory scanning, not a regular expression per line. The last
``TAIL_LINES`` lines are always kept (a process dies at the end of its log). Rules and the classifier
see only the kept lines; ``tests/unit/doctor`` checks that on every corpus item the findings are the
same whether a log is screened or read whole.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from forklift.doctor.lines import MAX_LINE, clean
from forklift.doctor.model import Line

CHUNK = 8 << 20
HEAD_LINES = 4000
TAIL_LINES = 300
TAIL_BYTES = 256 << 10
MAX_KEPT = 40_000
"""Kept lines beyond the head: the first half and the last half of them are kept when there are more."""
SNIFF_BYTES = 64 << 10

# Lower-case substrings that mark a line worth matching: failure words, the engines' and the kernel's
# prefixes, and the phase markers the context layer reads. Every rule pattern matches only lines that
# hold one of them (tests/unit/doctor/test_scan.py proves it on the corpus).
TRIGGERS: tuple[bytes, ...] = (
    b"error", b"exception", b"traceback", b"fail", b"fatal", b"critical", b"warn", b"kill", b"oom",
    b"out of memory", b"memory", b"timeout", b"timed out", b"time out", b"nvrm", b"xid", b"nccl", b"gloo",
    b"refused", b"unable", b"cannot", b"can't", b"could not", b"couldn't", b"not found", b"no such",
    b"invalid", b"unsupported", b"not support", b"denied", b"abort", b"panic", b"segmentation", b"sigsegv",
    b"sigbus", b"core dumped", b"deadline", b"unreachable", b"hang", b"stuck", b"mismatch", b"insufficient",
    b"exceed", b"too ", b"no available", b"no module", b"undefined symbol", b"raise", b"assert", b"exit",
    b"died", b"dead", b"unexpected", b"unrecognized", b"not allowed", b"not valid", b"requires",
    b"ray", b"raylet", b"gcs", b"placement group", b"tcpstore", b"rendezvous", b"ibv", b"mlx5", b"rdma",
    b"gid", b"address already", b"in use", b"bind", b"shm", b"shared memory", b"broadcast", b"rpc",
    b"cuda", b"driver", b"gpu", b"triton", b"ptxas", b"kv cache", b"cache blocks", b"max seq len",
    b"max_model_len", b"loading", b"load model", b"weights", b"capturing", b"graph", b"compil",
    b"startup complete", b"version", b"non-default args", b"gib", b"finish_reason", b"content",
    b"reasoning", b"tool", b"parser", b"template", b"huggingface", b"401", b"403", b"429", b"137",
    b"docker", b"container", b"nvidia", b"/dev/", b"patch", b"takes ", b"got an", b"keyerror",
    b"typeerror", b"valueerror", b"no kernel", b"heads", b"divisible", b"parallel", b"swap", b"page cache",
)

_LOGLIKE = re.compile(
    r"\b(?:INFO|WARN(?:ING)?|ERROR|DEBUG|CRITICAL|FATAL)\b|\d{1,2}:\d{2}:\d{2}|^\s*\[\s*\d+\.\d+\]|"
    r"Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception|Exit)\b|NVRM|NCCL|\bXid\b|"
    r"(?i:\b(?:error|failed|failure|killed|timed out|exception|fatal|warning|refused|denied|abort(?:ed)?)\b)"
)


@dataclass
class Excerpt:
    """What was kept of one input, and what is known about the whole of it."""

    source: str
    lines: list[Line] = field(default_factory=list)
    total_lines: int = 0
    total_bytes: int = 0
    binary: bool = False
    screened: bool = False
    """True when lines after the head were screened by the triggers (a long input)."""

    @property
    def empty(self) -> bool:
        return not any(line.text.strip() for line in self.lines)

    @property
    def loglike(self) -> bool:
        return any(_LOGLIKE.search(line.text) for line in self.lines)

    def texts(self) -> list[str]:
        return [line.text for line in self.lines]


def looks_binary(sample: bytes) -> bool:
    """NUL bytes or mostly undecodable bytes in the first bytes of an input."""
    if not sample:
        return False
    if sample.count(b"\x00") > max(1, len(sample) // 200):
        return True
    text = sample.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ord(ch) < 32 and ch not in "\t\n\r\x1b\x0c\x08")
    return bad > len(text) * 0.1


class Scanner:
    """Feed bytes (any chunking), then ``close()`` for the Excerpt. Memory stays bounded."""

    def __init__(self, source: str = "", *, head_lines: int = HEAD_LINES) -> None:
        self.source = source
        self.head_lines = head_lines
        self._pending = b""
        self._line_no = 0  # complete lines seen so far
        self._bytes = 0
        self._sniff = bytearray()
        self._first: list[Line] = []
        self._last: deque[Line] = deque(maxlen=MAX_KEPT // 2)
        self._dropped = 0
        self._tail = b""
        self._tail_first = 1  # line number of the first line in _tail
        self._screened = False

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if len(self._sniff) < SNIFF_BYTES:
            self._sniff += data[: SNIFF_BYTES - len(self._sniff)]
        self._bytes += len(data)
        buf = self._pending + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self._pending = buf if len(buf) <= MAX_LINE * 4 else buf[: MAX_LINE * 4]
            return
        self._pending = buf[cut + 1:]
        self._process(buf[: cut + 1])

    def close(self) -> Excerpt:
        if self._pending:
            self._process(self._pending + b"\n")
            self._pending = b""
        kept = {(x.number, x.text): x for x in (*self._first, *self._last)}
        for line in self._tail_lines():
            kept.setdefault((line.number, line.text), line)
        lines = [kept[k] for k in sorted(kept, key=lambda k: k[0])]
        return Excerpt(self.source, lines, self._line_no, self._bytes, looks_binary(bytes(self._sniff)),
                       self._screened)

    # -- internals -------------------------------------------------------------------------------------

    def _keep(self, number: int, raw: bytes) -> None:
        for text in clean(raw.decode("utf-8", errors="ignore")):
            line = Line(number, text, self.source)
            if len(self._first) < MAX_KEPT // 2:
                self._first.append(line)
            else:
                if len(self._last) == self._last.maxlen:
                    self._dropped += 1
                self._last.append(line)

    def _process(self, buf: bytes) -> None:
        """``buf`` holds whole lines, each ending in a newline."""
        start = 0
        if self._line_no < self.head_lines:
            pos = 0
            while self._line_no < self.head_lines and pos < len(buf):
                end = buf.find(b"\n", pos)
                self._line_no += 1
                self._keep(self._line_no, buf[pos:end][: MAX_LINE * 4])
                pos = end + 1
            start = pos
        if start < len(buf):
            self._screened = True
            self._screen(buf, start)
        self._remember_tail(buf)

    def _screen(self, buf: bytes, start: int) -> None:
        low = buf.lower()
        starts: set[int] = set()
        for trigger in TRIGGERS:
            i = low.find(trigger, start)
            while i >= 0:
                starts.add(low.rfind(b"\n", 0, i) + 1)
                end = low.find(b"\n", i)
                i = low.find(trigger, end + 1) if end >= 0 else -1
        number, prev = self._line_no, start
        for s in sorted(starts):
            s = max(s, start)
            number += buf.count(b"\n", prev, s)
            prev = s
            end = buf.find(b"\n", s)
            self._keep(number + 1, buf[s:end if end >= 0 else len(buf)][: MAX_LINE * 4])
        self._line_no += buf.count(b"\n", start)

    def _remember_tail(self, buf: bytes) -> None:
        joined = self._tail + buf
        if len(joined) > TAIL_BYTES:
            cut = joined.find(b"\n", len(joined) - TAIL_BYTES)
            cut = cut + 1 if cut >= 0 else len(joined) - TAIL_BYTES
            joined = joined[cut:]
        self._tail = joined
        self._tail_first = self._line_no - joined.count(b"\n") + 1

    def _tail_lines(self) -> list[Line]:
        raw = self._tail.split(b"\n")[:-1]
        skip = max(0, len(raw) - TAIL_LINES)
        out: list[Line] = []
        for k, piece in enumerate(raw[skip:], start=self._tail_first + skip):
            out.extend(Line(k, text, self.source) for text in clean(piece[: MAX_LINE * 4].decode("utf-8", "ignore")))
        return out


def scan_stream(stream: BinaryIO, source: str = "", *, head_lines: int = HEAD_LINES) -> Excerpt:
    scanner = Scanner(source, head_lines=head_lines)
    while True:
        data = stream.read(CHUNK)
        if not data:
            break
        scanner.feed(data)
    return scanner.close()


def scan_bytes(data: bytes, source: str = "", *, head_lines: int = HEAD_LINES) -> Excerpt:
    scanner = Scanner(source, head_lines=head_lines)
    for i in range(0, len(data), CHUNK):
        scanner.feed(data[i:i + CHUNK])
    return scanner.close()


def scan_text(lines: Iterable[str], source: str = "") -> Excerpt:
    """Lines that are already text (each item may hold several lines): every line is kept."""
    out: list[Line] = []
    number = 0
    size = 0
    for item in lines:
        size += len(item)
        for raw in item.split("\n"):
            number += 1
            out.extend(Line(number, text, source) for text in clean(raw))
    return Excerpt(source, out, number, size)
