"""Reading an input in one linear pass: bytes in, the lines worth matching out.

A log of any size is read in chunks. The first ``HEAD_LINES`` lines are all kept (the version banner,
arguments and, for a short log or a pasted report, everything). After that only the lines the screen
(``screen.py``: one 3-gram lookup per byte, with numpy) says a rule, the classifier or the phase reader
could need are kept, so a plain log costs a few passes over memory, not a regular expression per line.
The last ``TAIL_LINES`` lines are always kept (a process dies at the end of its log). Rules and the classifier
see only the kept lines; ``tests/unit/doctor`` checks that on every corpus item the findings are the
same whether a log is screened or read whole.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from forklift.doctor.findings import Line
from forklift.doctor.lines import MAX_LINE, clean
from forklift.doctor.screen import Screen, default_screen

CHUNK = 4 << 20
HEAD_LINES = 2000
HEAD_CONTEXT = 60
"""Of a long (screened) input's head, these first lines stay whatever they hold (banner, arguments)."""
TAIL_LINES = 300
TAIL_BYTES = 256 << 10
MAX_KEPT = 10_000
"""Kept lines beyond the head: the first half and the last half of them are kept when there are more."""
SNIFF_BYTES = 64 << 10

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

    def texts(self) -> list[str]:
        return [line.text for line in self.lines]


_CONTROLS = {c: None for c in range(32) if chr(c) not in "\t\n\r\x1b\x0c\x08"}


def looks_binary(sample: bytes) -> bool:
    """NUL bytes or mostly undecodable bytes in the first bytes of an input."""
    if not sample:
        return False
    if sample.count(b"\x00") > max(1, len(sample) // 200):
        return True
    text = sample.decode("utf-8", errors="replace")
    controls = len(text) - len(text.translate(_CONTROLS))
    return text.count("\ufffd") + controls > len(text) * 0.1


class Scanner:
    """Feed bytes (any chunking), then ``close()`` for the Excerpt. Memory stays bounded."""

    def __init__(self, source: str = "", *, head_lines: int = HEAD_LINES, screen: Screen | None = None,
                 tail_lines: int = TAIL_LINES) -> None:
        self.source = source
        self.head_lines = head_lines
        self.tail_lines = tail_lines
        self.screen = screen or default_screen()
        self._pending = b""
        self._line_no = 0  # complete lines seen so far
        self._bytes = 0
        self._sniff = bytearray()
        self._head: list[tuple[int, bytes]] = []
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
        self._keep_head()
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

    def _keep_head(self) -> None:
        """A short input keeps its whole head; a long one its first HEAD_CONTEXT lines and what the screen keeps."""
        head, self._head = self._head, []
        if not self._screened:
            for number, raw in head:
                self._keep(number, raw)
            return
        for number, raw in head[:HEAD_CONTEXT]:
            self._keep(number, raw)
        rest = head[HEAD_CONTEXT:]
        if not rest:
            return
        buf = b"".join(raw + b"\n" for _, raw in rest)
        offsets = [0]
        for _, raw in rest:
            offsets.append(offsets[-1] + len(raw) + 1)
        index = {o: k for k, o in enumerate(offsets)}
        for start in self.screen.line_starts(buf.lower(), 0):
            number, raw = rest[index[start]]
            self._keep(number, raw)

    def _process(self, buf: bytes) -> None:
        """``buf`` holds whole lines, each ending in a newline."""
        start = 0
        if self._line_no < self.head_lines:
            pos = 0
            while self._line_no < self.head_lines and pos < len(buf):
                end = buf.find(b"\n", pos)
                self._line_no += 1
                self._head.append((self._line_no, buf[pos:end][: MAX_LINE * 4]))
                pos = end + 1
            start = pos
        if start < len(buf):
            if not self._screened:
                self._screened = True
                self._keep_head()
            self._screen(buf, start)
        self._remember_tail(buf)

    def _screen(self, buf: bytes, start: int) -> None:
        number, prev = self._line_no, start
        for s in self.screen.line_starts(buf.lower(), start):
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
        if self.tail_lines <= 0:
            return []
        skip = max(0, len(raw) - self.tail_lines)
        out: list[Line] = []
        for k, piece in enumerate(raw[skip:], start=self._tail_first + skip):
            out.extend(Line(k, text, self.source) for text in clean(piece[: MAX_LINE * 4].decode("utf-8", "ignore")))
        return out


def scan_stream(stream: BinaryIO, source: str = "", *, head_lines: int = HEAD_LINES,
                screen: Screen | None = None) -> Excerpt:
    scanner = Scanner(source, head_lines=head_lines, screen=screen)
    while True:
        data = stream.read(CHUNK)
        if not data:
            break
        scanner.feed(data)
    return scanner.close()


def scan_bytes(data: bytes, source: str = "", *, head_lines: int = HEAD_LINES,
               screen: Screen | None = None, tail_lines: int = TAIL_LINES) -> Excerpt:
    scanner = Scanner(source, head_lines=head_lines, screen=screen, tail_lines=tail_lines)
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
