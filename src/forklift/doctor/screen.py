"""The screen: which lines of a large log can matter, found at C speed whatever the number of rules.

Every rule pattern has literal anchors (``anchors.py``): a match contains one of them. To each anchor (and
to each of ``FAILURE_WORDS`` and ``PHASE_WORDS``, which the statistical and context layers read) the
screen assigns one of its three-character grams, the one least seen in busy healthy lines (``PROBE``).
A lower-cased chunk is turned into the 3-gram codes at its even offsets with numpy and looked up in a
2^24-entry table: a line is kept when it holds one of the chosen grams (each anchor gets two overlapping
grams, so one of them sits at an even offset wherever the anchor is). Every line that could match a rule holds its
anchor and so its gram: the screen never drops a line a rule needs (``tests/unit/doctor/test_scan.py``
checks it on the corpus); extra lines only cost time. Without numpy it falls back to ``bytes.find``.

Per kept line, ``Screen.rules_for`` names the rules whose anchors the line holds, so only those rules'
regular expressions run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from forklift.doctor.anchors import PROBE, anchors
from forklift.doctor.findings import Rule

FAILURE_WORDS = (
    "error", "exception", "traceback", "fatal", "critical", "killed", "fail", "panic", "abort", "segmentation",
    "sigsegv", "core dumped", "timed out", "timeout", "hang", "hung", "stuck", "freez", "crash",
    "out of memory", "refused", "denied", "unable", "cannot", "can't", "could not", "not found", "no such",
    "invalid", "unsupported", "not support", "mismatch", "nvrm", " xid", "xid ", "nccl", "died", "dead",
    "exit code", "wrong", "missing", "problem", "broken", "warn", "oom-", "oomk", "oom'", " oom", "oom ",
)
PHASE_WORDS = (
    "non-default args", "api server version", "starting to load model", "loading weights", "loading model",
    "checkpoint shards", "model loading took", "weights took", "capturing cuda graph", "torch.compile",
    "kv cache size", "available kv cache memory", "maximum concurrency", "application startup complete",
    "starting vllm",
)
GRAM = 3
MIN_SCREEN = GRAM + 1


_PROBE = PROBE.encode()


def _grams(anchor: bytes) -> tuple[bytes, bytes]:
    """Two overlapping three-byte grams of the anchor (offsets k and k + 1), the pair least seen in busy
    healthy lines. Wherever the anchor starts in a text, one of the two starts at an even offset, so the
    screen only needs the grams at even offsets."""
    k = min(range(len(anchor) - GRAM), key=lambda i: (_PROBE.count(anchor[i:i + GRAM])
                                                      + _PROBE.count(anchor[i + 1:i + 1 + GRAM]), i))
    return anchor[k:k + GRAM], anchor[k + 1:k + 1 + GRAM]


def _code(gram: bytes) -> int:
    return (gram[0] << 16) | (gram[1] << 8) | gram[2]


@dataclass
class Screen:
    """Chosen grams, the rules behind each anchor, and the lookup table (built on first use)."""

    anchors: dict[bytes, frozenset[int]]
    """Anchor (lower-case ASCII bytes) -> indices of the rules that need it (failure and phase words: none)."""
    grams: dict[bytes, list[bytes]] = field(default_factory=dict)
    """Gram -> the anchors it stands for."""
    _table: Any = None

    def __post_init__(self) -> None:
        for a in self.anchors:
            if len(a) < MIN_SCREEN:
                raise ValueError(f"anchor {a!r} is shorter than {MIN_SCREEN} bytes: the screen cannot keep it")
            for g in _grams(a):
                self.grams.setdefault(g, []).append(a)
        self._keys = frozenset(g for g, anchors_ in self.grams.items() if any(self.anchors[a] for a in anchors_))

    @property
    def codes(self) -> list[int]:
        return sorted(_code(g) for g in self.grams)

    def table(self) -> Any:
        if self._table is None:
            import numpy as np

            table = np.zeros(1 << 24, dtype=np.bool_)
            table[np.array(self.codes, dtype=np.uint32)] = True
            self._table = table
        return self._table

    def line_starts(self, low: bytes, start: int) -> list[int]:
        """Starts of the lines of ``low`` (a lower-cased buffer of whole lines) from ``start`` that hold a gram."""
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy comes with matplotlib, a dependency
            return self._line_starts_slow(low, start)
        arr = np.frombuffer(low, dtype=np.uint8)[start:]
        n = (len(arr) - GRAM + 2) // 2  # even offsets 0, 2, ... where a whole gram fits
        if n <= 0:
            return []
        codes = arr[0:2 * n:2].astype(np.uint32)
        codes <<= 8
        codes |= arr[1:2 * n:2]
        codes <<= 8
        codes |= arr[2:2 * n + 1:2]
        hits = np.flatnonzero(self.table()[codes]) * 2
        del codes
        if not len(hits):
            return []
        newlines = np.flatnonzero(arr == 10)
        line_of = np.unique(np.searchsorted(newlines, hits))
        starts = np.where(line_of == 0, 0, newlines[np.maximum(line_of - 1, 0)] + 1)
        return [int(s) + start for s in starts]

    def _line_starts_slow(self, low: bytes, start: int) -> list[int]:
        found: set[int] = set()
        for g in self.grams:
            i = low.find(g, start)
            while i >= 0:
                found.add(low.rfind(b"\n", 0, i) + 1)
                end = low.find(b"\n", i)
                i = low.find(g, end + 1) if end >= 0 else -1
        return sorted(max(s, start) for s in found)

    def keeps(self, low: bytes) -> bool:
        """Whether the screen keeps this lower-cased line (it holds an anchor or a failure / phase word)."""
        present = {low[i:i + GRAM] for i in range(len(low) - GRAM + 1)}
        return any(a in low for g in present.intersection(self.grams) for a in self.grams[g])

    def rules_for(self, low: bytes) -> set[int]:
        """Indices of the rules whose anchors the line (UTF-8, lower-cased by ``bytes.lower``) holds."""
        out: set[int] = set()
        present = {low[i:i + GRAM] for i in range(len(low) - GRAM + 1)} & self._keys
        for g in present:
            for a in self.grams[g]:
                idx = self.anchors[a]
                if idx and not idx <= out and a in low:
                    out |= idx
        return out


def rule_anchors(rule: Rule) -> list[frozenset[str]]:
    """The anchor set of each of the rule's patterns (a pattern without one is screened by nothing)."""
    out = []
    for p in (*rule.match.all, *rule.match.any, *rule.match.none):
        found = anchors(p)
        if found:
            out.append(found)
    return out


def build(rules: Sequence[Rule]) -> Screen:
    by_anchor: dict[bytes, set[int]] = {}
    for i, r in enumerate(rules):
        for group in rule_anchors(r):
            for a in group:
                by_anchor.setdefault(a.encode().lower(), set()).add(i)
    for w in (*FAILURE_WORDS, *PHASE_WORDS):
        by_anchor.setdefault(w.encode(), set())
    return Screen({a: frozenset(v) for a, v in sorted(by_anchor.items())})


@lru_cache(maxsize=1)
def default_screen() -> Screen:
    from forklift.doctor.kb import load_rules

    return build(load_rules())
