"""What a healthy run writes that is not a failure: debug output, a deliberate shutdown, requests that failed
while the server went on answering.

A run that reached serving and was then stopped (SIGTERM / SIGINT, Ctrl-C) logs tracebacks while it tears down
(``EngineDeadError`` from the output handler, leaked semaphores): they are the stop, not a cause. A request that
fails (a tool call the model wrote badly, a prompt too long) is logged at ERROR with its traceback, and the
server answers the next request: when a later request line says 2xx, those ERROR blocks did not take the server
down. In a run that reached serving, vLLM's DEBUG lines report choices (the attention backends it skipped and
why), not the failure (a pasted DEBUG excerpt, with no serving line, is read as it is).

The exception: a server whose last statistics line has requests running and nothing generated or prefilled
(``stalled``) is stuck, whatever else its log says (a pipeline stage that died leaves the head waiting, silently).

``split`` keeps the lines the layers should read and sets the rest apart, with the reason, so a report can
still say what it left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from forklift.doctor.context import PHASES
from forklift.doctor.findings import Line

SERVING = dict(PHASES)["serving"]
STOP = re.compile(
    r"received signal[= ]SIG(?:TERM|INT)\b|Received SIG(?:TERM|INT)\b|received SIG(?:TERM|INT)\b|"
    r"signal[= ](?:SIGTERM|SIGINT|15|2) received|^\s*KeyboardInterrupt\s*$|Aborted!$"
)
ANSWERED = re.compile(r'"(?:GET|POST|PUT|DELETE) \S+ HTTP/[\d.]+" 2\d\d\b')
DEBUG = re.compile(r"^(?:\(\w+ pid=\d+\) )?DEBUG \d\d-\d\d ")
RESUME = re.compile(dict(PHASES)["starting"].pattern + "|" + ANSWERED.pattern + r"|Avg prompt throughput:")
"""A line that ends a teardown: a new start, or the server still (or again) at work."""
TEARDOWN_MAX = 400
"""A stop's teardown (every process's goodbye and its tracebacks) fits in this many lines; what follows is read."""
STATS = re.compile(r"Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
                   r"Running: (\d+) reqs")
_LEVEL = re.compile(r"\b(?:INFO|DEBUG|WARN(?:ING)?|ERROR|CRITICAL|FATAL)\b")
_ERROR_LEVEL = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:ERROR|CRITICAL) \d\d-\d\d ")


@dataclass
class Split:
    """The lines to diagnose and what was set apart (teardown after a stop, errors the server survived)."""

    kept: list[Line]
    teardown: list[Line] = field(default_factory=list)
    survived: list[Line] = field(default_factory=list)
    debug: int = 0


def served(lines: Sequence[Line]) -> int | None:
    """Index of the first line that shows the server up (vLLM's API server started), or None."""
    for i, line in enumerate(lines):
        if SERVING.search(line.text):
            return i
    return None


def stalled(lines: Sequence[Line]) -> Line | None:
    """The last statistics line when it shows requests running with no token prefilled or generated, else None."""
    for line in reversed(lines):
        m = STATS.search(line.text)
        if m:
            stuck = float(m.group(1)) == 0.0 and float(m.group(2)) == 0.0 and int(m.group(3)) > 0
            return line if stuck else None
    return None


def _request_errors(lines: Sequence[Line]) -> set[int]:
    """Indices of ERROR-level blocks: an ERROR line of vLLM's log and the unlevelled lines (a traceback) after it."""
    out: set[int] = set()
    inside = False
    for i, line in enumerate(lines):
        if _ERROR_LEVEL.search(line.text):
            inside = True
            out.add(i)
        elif inside and not _LEVEL.search(line.text) and not ANSWERED.search(line.text):
            out.add(i)
        else:
            inside = False
    return out


def split(lines: Sequence[Line], run_served: bool) -> Split:
    """Set apart what a run that reached serving (``run_served``: this source or another of the run) wrote while
    it was stopped on purpose, and the request errors it answered after; drop vLLM's DEBUG lines."""
    if not run_served:
        return Split(list(lines))
    debug = sum(1 for x in lines if DEBUG.search(x.text))
    rest = [x for x in lines if not DEBUG.search(x.text)] if debug else list(lines)
    out = Split([], debug=debug)
    while rest:
        part, rest = _segment(rest, out)
        out.kept.extend(part)
    return out


def _segment(lines: list[Line], out: Split) -> tuple[list[Line], list[Line]]:
    """One stretch of a log up to the end of its teardown: the lines to keep (its request errors the server
    answered after moved to ``out.survived``, its teardown to ``out.teardown``) and the lines after it (the
    log of a later start, or traffic: the stop was not the end)."""
    start = served(lines)
    stop = next((i for i in range(start or 0, len(lines)) if STOP.search(lines[i].text)), None)
    rest: list[Line] = []
    if stop is not None:
        end = min(len(lines), stop + TEARDOWN_MAX)
        resume = next((i for i in range(stop + 1, end) if RESUME.search(lines[i].text)), end)
        out.teardown.extend(lines[stop:resume])
        lines, rest = lines[:stop], lines[resume:]
    if start is not None:
        last = next((i for i in range(len(lines) - 1, start, -1) if ANSWERED.search(lines[i].text)), None)
        if last is not None:
            stretch = lines[start:last]
            drop = _request_errors(stretch)
            out.survived.extend(x for k, x in enumerate(stretch) if k in drop)
            lines = lines[:start] + [x for k, x in enumerate(stretch) if k not in drop] + lines[last:]
    return lines, rest
