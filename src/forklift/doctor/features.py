"""Text to features for the statistical layer; the training script (scripts/doctor_train.py) uses the same code.

Numbers, hex ids and addresses are normalised away (a port or a pid says nothing about the cause), words
are lower-cased and also split at ``_`` and camelCase (``ActorHandleNotFoundError`` gives ``actor``,
``handle``, ...), and each word contributes character 4-grams, so a wording never seen still shares
features with the ones that were. Weights are ``(1 + log tf) * idf``, L2-normalised.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from forklift.doctor.anchors import anchors
from forklift.doctor.findings import Line

WINDOW_HEAD = 120
WINDOW_TAIL = 280
MAX_CHARS = 60_000
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b[0-9a-fA-F]{12,}\b")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_ERRORISH = re.compile(
    r"(?:Error|Exception|Traceback|FATAL|CRITICAL|Killed|failed|timed out|refused|denied|abort)|\bERROR\b|"
    r"\berror\b|NVRM|Xid|(?i:out of memory|oom|hang|stuck|not supported|unsupported|cannot|unable|"
    r"could not|no such|not found|invalid|mismatch|empty|null|crash|freez|exit code|segfault)",
)


_FAILURE = re.compile(
    r"Traceback \(most recent call last\)|(?:^|[\s:(])(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)(?::|\s*$)|"
    r"\b(?:ERROR|FATAL|CRITICAL)\b|NCCL WARN|NVRM|\bXid\b|^\s*Killed\s*$|Out of memory|oom-kill|OOMKilled|"
    r"core dumped|Segmentation fault|SIGSEGV|SIGKILL|(?:^|\s)error:|exit(?:s|ed)? (?:with )?(?:code|status):? ?[1-9]|"
    r"(?i:\bhang(?:s|ing)?\b|\bhung\b|\bstuck\b|deadlock|\bfreez|\bcrash|\bwedge|not supported|unsupported|"
    r"cannot|can't|"
    r"could not|couldn't|unable to|\bfail|timed out|\btimeout|refused|denied|no such|not found|invalid|mismatch|"
    r"\bempty\b|out of resource|insufficient|exceeds?\b|too (?:old|small|large|long)|\berrors?\b|\bbug\b|problem|"
    r"broken|wrong|missing|\blost\b|\bdied\b|\bdead\b|\bkill|\boom\b|out of memory|no module|\w+Error\b|"
    r"unauthori[sz]ed|forbidden|too many requests|gated|incompatible|conflict)"
)
_BENIGN = re.compile(
    r"\b(?:INFO|DEBUG)\b|\bWARN(?:ING)?\b|\[[WI]\d{4}|^\s*[WI]\d{4} |DeprecationWarning|FutureWarning|UserWarning|"
    r"warnings\.warn|\[shutdown\]|^\s*frame #\d+:"
)


_SEVERE = re.compile(r"\b(?:ERROR|FATAL|CRITICAL)\b|NCCL WARN")  # NCCL has no ERROR level: WARN is its error line
_PROSE = re.compile(
    r"^(?!.*(?:\b(?:INFO|DEBUG|WARN(?:ING)?|ERROR)\b|\d{1,2}:\d{2}:\d{2}|File \")).*?(?:[A-Za-z'`,-]+\s+){6}")


def report_like(texts: Sequence[str]) -> bool:
    """A pasted issue-style report: short, with at least a third of its lines written as prose."""
    lines = [t for t in texts if t.strip()]
    if not lines or len(lines) > 400:
        return False
    return sum(1 for t in lines if _PROSE.search(t)) * 3 >= len(lines)


def _quick(rx: re.Pattern[str]) -> tuple[str, ...]:
    """Lower-case words one of which every match of rx holds (a cheap test before the expression)."""
    found = anchors(rx.pattern)
    if not found:
        raise ValueError(f"no literal anchors in {rx.pattern[:60]!r}")
    return tuple(sorted(found))


_ERRORISH_QUICK = _quick(_ERRORISH)
_FAILURE_QUICK = _quick(_FAILURE)


def errorish(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in _ERRORISH_QUICK) and _ERRORISH.search(text) is not None


def failure_line(text: str) -> bool:
    """A line that reports a failure: an exception, an error-level line, a kernel or NCCL warning, or a
    problem said in words; INFO / DEBUG / WARNING lines of a structured log are not failures by themselves."""
    low = text.lower()
    if not any(w in low for w in _FAILURE_QUICK):
        return False
    if _BENIGN.search(text) and not _SEVERE.search(text):
        return False
    return _FAILURE.search(text) is not None


def window(lines: Sequence[Line]) -> list[Line]:
    """The lines the classifier reads: all of a short input; else the first error-looking lines and the end."""
    if len(lines) <= WINDOW_HEAD + WINDOW_TAIL:
        return list(lines)
    head = [x for x in lines[:-WINDOW_TAIL] if errorish(x.text)][:WINDOW_HEAD]
    return head + list(lines[-WINDOW_TAIL:])


def window_text(lines: Sequence[Line]) -> str:
    text = "\n".join(x.text for x in window(lines))
    return text[-MAX_CHARS:]


def words(text: str) -> list[str]:
    """Lower-cased word tokens plus their ``_`` / camelCase parts (numbers and hex ids dropped)."""
    out: list[str] = []
    for raw in _WORD.findall(_HEX.sub(" ", text)):
        low = raw.lower()
        out.append(low)
        parts = [p.lower() for chunk in raw.split("_") for p in _CAMEL.findall(chunk) if not p.isdigit()]
        if len(parts) > 1:
            out.extend(p for p in parts if len(p) > 1)
    return out


_EXC = re.compile(
    r"(?<![\w.])(?:[A-Za-z_]\w*\.)*([A-Z]\w*(?:Error|Exception|Exit|Interrupt|Died|Killed))\b(?::\s*(.*))?")
_EXC_WORDS = 12


def structure(text: str) -> Counter[str]:
    """Terms from the shape of a failure: ``x:type`` per exception class raised anywhere, ``l:type`` for the
    last one (the final line of the last traceback is usually the cause) and ``m:word`` for the first words
    of its message."""
    counts: Counter[str] = Counter()
    last: tuple[str, str] | None = None
    for line in text.splitlines():
        if "rror" in line or "xception" in line or "Exit" in line or "Interrupt" in line or "Died" in line \
                or "Killed" in line:
            for m in _EXC.finditer(line):
                counts["x:" + m.group(1).lower()] = 1
                last = (m.group(1), m.group(2) or "")
    if last is not None:
        counts["l:" + last[0].lower()] += 1
        counts.update("m:" + w for w in words(last[1])[:_EXC_WORDS] if len(w) > 1)
    return counts


def terms(text: str) -> Counter[str]:
    """Raw term counts: ``w:word``, ``b:word word`` (adjacent words), ``c:4gram`` (inside words) and the
    failure-shape terms of ``structure``."""
    counts: Counter[str] = structure(text)
    toks = [t for t in words(text) if len(t) > 1]
    full = [t.lower() for t in _WORD.findall(_HEX.sub(" ", text)) if len(t) > 1]
    counts.update("w:" + t for t in toks)
    counts.update(f"b:{a} {b}" for a, b in zip(full, full[1:], strict=False))
    for t, n in Counter(full).items():
        padded = f"<{t}>"
        for i in range(len(padded) - 3):
            counts["c:" + padded[i:i + 4]] += n
    return counts


def vector(text: str, idf: Mapping[str, float]) -> dict[str, float]:
    """The L2-normalised tf-idf vector of a text over a vocabulary (terms outside it are dropped)."""
    weights = {t: (1.0 + math.log(n)) * idf[t] for t, n in terms(text).items() if t in idf}
    norm = math.sqrt(sum(w * w for w in weights.values()))
    return {t: w / norm for t, w in weights.items()} if norm else {}
