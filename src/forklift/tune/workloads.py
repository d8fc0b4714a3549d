"""What ``tune`` measures with: a synthetic workload per class, or a replay of the owner's own prompts.

A workload is a list of requests (prompt text, output tokens) and the concurrency it runs at; ``tune`` writes it
as a JSONL prompt file (``{"prompt", "output_len"}`` per line) and runs ``forklift bench``'s load generator with
it (``bench.workload.load_prompt_file``), so the requests are sent in order, cycling.

Classes (lengths in words of ordinary text, about 1.3 tokens each on common tokenizers; lognormal around the
median, clipped to the range, seeded):

- ``chat``: independent prompts (median 120 words, 20..500), answers of median 128 tokens (32..320), 8 users.
- ``rag``: four long documents (900 words each) shared as prefixes, each request one document plus a short
  question; answers of median 64 tokens; 8 users. Prefix caching and chunked prefill decide it.
- ``code``: code-like prompts (median 300 words, 80..900) and long answers (median 256 tokens); 4 users.
- ``agent``: one long system prompt and tool list (600 words) shared by every request, then a session's growing
  history (each turn repeats the previous turns); short answers (median 40 tokens, tool calls); 8 users.
- ``summarize``: a long document of its own per request (median 900 words, 500..1,500, nothing shared, so prefix
  caching cannot skip the prefill) and a short summary (median 64 tokens, 32..128); 8 users. Every new request's
  prefill stalls the steps of every running stream, so the number of streams in flight (``max_num_seqs``) sets
  the TPOT.

``size`` scales every prompt length (a CPU run takes 0.5; prompts never exceed ``max_prompt_words``).
A replay: a JSONL of prompts (``forklift bench --prompts``' format); its concurrency is given.
"""

from __future__ import annotations

import difflib
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.errors import TuneError

CLASSES = ("chat", "rag", "code", "agent", "summarize")
_WORDS = ("the", "warehouse", "opened", "before", "dawn", "and", "first", "trucks", "backed", "into", "loading",
          "bays", "while", "night", "crew", "counted", "pallets", "every", "crate", "carried", "label", "with",
          "its", "weight", "destination", "name", "of", "person", "who", "packed", "it", "driver", "learns",
          "floor", "way", "sailor", "learns", "harbour", "where", "concrete", "dips", "which", "aisle", "is",
          "too", "narrow", "for", "wide", "load", "when", "afternoon", "sun", "blinds", "north", "doors", "orders",
          "arrive", "in", "waves", "some", "days", "bring", "machine", "parts", "books", "fruit", "paint", "glass",
          "cables", "furniture", "medicine", "scheduler", "balances", "them", "against", "number", "of", "drivers",
          "battery", "charge", "each", "truck", "time", "ships", "leave", "quay")
_CODE = ("def", "return", "for", "in", "if", "else", "while", "import", "class", "self", "items", "count", "total",
         "value", "key", "result", "append", "len", "range", "None", "True", "False", "data", "index", "=", "+=",
         "(", ")", ":", "[", "]", ",", ".")


@dataclass(frozen=True)
class Request:
    prompt: str
    output_len: int


@dataclass(frozen=True)
class Workload:
    name: str
    concurrency: int
    requests: tuple[Request, ...]
    description: str = ""
    shared_prefix: bool = False
    source: str = "synthetic"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_words(self) -> float:
        return sum(len(r.prompt.split()) for r in self.requests) / max(1, len(self.requests))

    @property
    def mean_output(self) -> float:
        return sum(r.output_len for r in self.requests) / max(1, len(self.requests))

    def write_jsonl(self, path: Path, start: int = 0) -> Path:
        """The requests as bench's prompt file, beginning at request ``start`` (then wrapping round)."""
        k = start % max(1, len(self.requests))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"prompt": r.prompt, "output_len": r.output_len}) + "\n"
                                for r in self.requests[k:] + self.requests[:k]), encoding="utf-8")
        return path

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "concurrency": self.concurrency, "requests": len(self.requests),
                "mean_prompt_words": round(self.mean_words, 1), "mean_output_tokens": round(self.mean_output, 1),
                "shared_prefix": self.shared_prefix, "source": self.source, "description": self.description,
                **self.meta}


def _length(rng: random.Random, median: float, low: int, high: int) -> int:
    return max(low, min(high, round(median * math.exp(rng.gauss(0.0, 0.5)))))


def _text(rng: random.Random, words: int, vocab: tuple[str, ...] | list[str] = _WORDS) -> str:
    return " ".join(rng.choice(vocab) for _ in range(max(1, words)))


def _code(rng: random.Random, words: int) -> str:
    lines, left = [], max(1, words)
    while left > 0:
        n = min(left, rng.randint(4, 12))
        lines.append("    " * rng.randint(0, 2) + _text(rng, n, _CODE + tuple(_WORDS[:40])))
        left -= n
    return "\n".join(lines)


def synthetic(kind: str, *, count: int = 64, seed: int = 0, size: float = 1.0,
              max_prompt_words: int | None = None) -> Workload:
    """One of ``CLASSES``, ``count`` requests (see the module's doc). TuneError for an unknown class."""
    if kind not in CLASSES:
        close = difflib.get_close_matches(kind, list(CLASSES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TuneError(f"--workload {kind!r} is neither a workload class nor an existing file{hint}",
                        fix=f"Pass one of {', '.join(CLASSES)} or a JSONL file of prompts.")
    if count < 1 or size <= 0:
        raise TuneError(f"a workload of {count} requests at size {size}", fix="Pass count >= 1 and size > 0.")
    rng = random.Random(f"{kind}:{seed}")
    cap = max_prompt_words or 10**9

    def words(median: float, low: int, high: int) -> int:
        return min(cap, _length(rng, median * size, max(1, round(low * size)), max(2, round(high * size))))

    out: list[Request] = []
    if kind == "chat":
        for _ in range(count):
            out.append(Request(_text(rng, words(120, 20, 500)), _length(rng, 128, 32, 320)))
        return Workload(kind, 8, tuple(out), "independent chat turns", False)
    if kind == "code":
        for _ in range(count):
            out.append(Request("Complete this function:\n" + _code(rng, words(300, 80, 900)),
                               _length(rng, 256, 64, 512)))
        return Workload(kind, 4, tuple(out), "code completion: medium prompts, long answers", False)
    if kind == "rag":
        doc_words = max(1, min(cap - 40, round(900 * size)))  # header and question: at most 33 words
        docs = [f"Document {d}: " + _text(rng, doc_words) for d in range(4)]
        for i in range(count):
            question = "Question: " + _text(rng, _length(rng, 16, 6, 30)) + "?"
            out.append(Request(docs[i % len(docs)] + "\n\n" + question, _length(rng, 64, 16, 160)))
        return Workload(kind, 8, tuple(out), "retrieval: four shared documents, short questions", True,
                        meta={"documents": len(docs), "document_words": doc_words})
    if kind == "summarize":
        for i in range(count):
            doc = f"Report {i}: " + _text(rng, min(words(900, 500, 1500), max(1, cap - 12)))  # 12: the frame
            out.append(Request(doc + "\n\nSummarize the report above in a few sentences.", _length(rng, 64, 32, 128)))
        return Workload(kind, 8, tuple(out), "summaries of long documents, one document per request", False)
    # agent: a shared system prompt, then per session a growing history
    system = "You are an agent with tools search, fetch, write. " + _text(rng, round(600 * size))
    sessions = 8
    history: list[list[str]] = [[] for _ in range(sessions)]
    for i in range(count):
        s = i % sessions
        turn = "User: " + _text(rng, _length(rng, 30, 8, 80))
        prompt = "\n".join([system, *history[s], turn])
        while len(prompt.split()) > cap and history[s]:
            history[s].pop(0)
            prompt = "\n".join([system, *history[s], turn])
        out.append(Request(prompt, _length(rng, 40, 12, 120)))
        history[s] += [turn, "Assistant: " + _text(rng, _length(rng, 25, 5, 60))]
    return Workload(kind, sessions, tuple(out), "agent sessions: shared system prompt, growing history", True,
                    meta={"sessions": sessions})


def replay(path: Path, *, concurrency: int, default_output_len: int = 128) -> Workload:
    """A JSONL of ``{"prompt", "output_len"?}`` (``max_tokens`` also read), sent in order at ``concurrency``."""
    if concurrency < 1:
        raise TuneError(f"concurrency {concurrency} for the replay", fix="Pass --concurrency 1 or more.")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TuneError(f"{path}: cannot read the workload file: {exc}",
                        fix="Pass a UTF-8 JSONL file of {\"prompt\": ..., \"output_len\": ...} lines.") from exc
    out: list[Request] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise TuneError(f"{path}:{number}: not JSON ({exc})",
                            fix='Each line must be {"prompt": "...", "output_len": 128}.') from exc
        prompt = obj.get("prompt") if isinstance(obj, dict) else None
        n = obj.get("output_len", obj.get("max_tokens", default_output_len)) if isinstance(obj, dict) else None
        if not isinstance(prompt, str) or not prompt or not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise TuneError(f"{path}:{number}: needs a non-empty 'prompt' and a positive integer 'output_len'",
                            fix='Each line must be {"prompt": "...", "output_len": 128}.')
        out.append(Request(prompt, n))
    if not out:
        raise TuneError(f"{path}: no prompts in the file", fix="Put one JSON object per line.")
    return Workload(path.stem, concurrency, tuple(out), f"replay of {path}", False, source=str(path))


def resolve(spec: str, *, concurrency: int | None = None, size: float = 1.0, count: int = 64,
            max_prompt_words: int | None = None) -> Workload:
    """A class name or a JSONL path (a path wins when the file exists)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return replay(path, concurrency=concurrency or 8)
    w = synthetic(spec, count=count, size=size, max_prompt_words=max_prompt_words)
    if concurrency is not None:
        if concurrency < 1:
            raise TuneError(f"--concurrency {concurrency}", fix="Pass --concurrency 1 or more.")
        w = Workload(w.name, concurrency, w.requests, w.description, w.shared_prefix, w.source, w.meta)
    return w
