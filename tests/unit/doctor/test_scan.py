"""The scanner and its screen: a long log is read in one pass, and screening never drops a line a rule needs."""

from __future__ import annotations

import io
import os

import pytest

from forklift.doctor import scan_bytes, scan_stream, scan_text
from forklift.doctor.anchors import anchors, quiet
from forklift.doctor.findings import Line
from forklift.doctor.lines import MAX_LINE
from forklift.doctor.match import default_matcher
from forklift.doctor.scan import looks_binary
from forklift.doctor.screen import FAILURE_WORDS, PHASE_WORDS, default_screen

from .conftest import DATA, excerpts, train_items

TEXTS = [(i.stem, i.text) for i in train_items()] + [(e.name, e.log.read_text(errors="replace")) for e in excerpts()]


def _rules(lines: list[Line]) -> set[str]:
    return {f.rule for f in default_matcher().run(lines)}


@pytest.mark.parametrize(("name", "text"), TEXTS, ids=[n for n, _ in TEXTS])
def test_screening_keeps_every_line_a_rule_needs(name: str, text: str) -> None:
    whole = scan_text([text]).lines
    screened = scan_bytes(text.encode(), name, head_lines=0, tail_lines=0)
    assert screened.screened
    assert _rules(screened.lines) == _rules(whole)


def test_both_screens_keep_every_line_that_holds_an_anchor() -> None:
    screen = default_screen()
    for _, text in TEXTS:
        low = text.encode().lower()
        starts = [0] + [i + 1 for i, c in enumerate(low) if c == 10]
        needed = {s for s in starts if any(a in low[s:low.find(b"\n", s) % (len(low) + 1)] for a in screen.anchors)}
        assert needed <= set(screen.line_starts(low, 0))
        assert needed <= set(screen._line_starts_slow(low, 0))


def test_every_rule_pattern_has_an_anchor_the_screen_can_find_quietly() -> None:
    from forklift.doctor import load_rules

    for r in load_rules():
        for p in (*r.match.all, *r.match.any, *r.match.none):
            found = anchors(p)
            assert found, f"{r.id}: pattern {p[:60]!r} has no literal anchor"
            assert all(len(a) >= 4 and quiet(a) for a in found), (r.id, sorted(found))
    assert all(quiet(w) for w in FAILURE_WORDS + PHASE_WORDS)


def test_anchors_of_alternations_and_optional_parts() -> None:
    assert anchors(r"No available memory for the cache blocks") == frozenset(
        {"no available memory for the cache blocks"})
    assert anchors(r"(?:RayChannelTimeoutError|Timed out waiting)") == frozenset(
        {"raychanneltimeouterror", "timed out waiting"})
    assert anchors(r"(?:foo)?barbaz") == frozenset({"barbaz"})
    assert anchors(r"\d+\s+") is None


def test_a_long_log_keeps_its_failure_with_the_right_line_number() -> None:
    filler = b"(APIServer pid=1) INFO 11-30 04:11:45 [loggers.py:335] Engine 000: Avg prompt throughput: 7.9 tokens/s\n"
    failure = (DATA / "excerpts" / "vllm-4327-fp8-capability.log").read_bytes()
    data = filler * 50_000 + failure + filler * 500
    ex = scan_bytes(data, "big.log")
    assert ex.screened and ex.total_lines == 50_000 + failure.count(b"\n") + 500
    hit = [x for x in ex.lines if "Minimum capability: 90" in x.text]
    assert hit and hit[0].number == 50_001
    assert len(ex.lines) < 500, "busy healthy lines are not kept"


def test_chunking_does_not_change_what_is_kept() -> None:
    text = (DATA / "excerpts" / "vllm-27508-kv-cache-gpt-oss.log").read_bytes() * 300
    whole = scan_bytes(text, "a", head_lines=10)
    stream = io.BytesIO(text)
    from forklift.doctor.scan import Scanner

    scanner = Scanner("a", head_lines=10)
    while chunk := stream.read(997):
        scanner.feed(chunk)
    assert [(x.number, x.text) for x in scanner.close().lines] == [(x.number, x.text) for x in whole.lines]


def test_binary_and_empty_input_are_recognised() -> None:
    assert scan_bytes(b"", "e").empty
    assert scan_bytes(b"\n\n  \n", "e").empty
    assert looks_binary(os.urandom(4096) + b"\x00" * 100)
    assert scan_bytes(bytes(range(256)) * 64, "b").binary
    assert not scan_bytes((DATA / "excerpts" / "vllm-27508-kv-cache-gpt-oss.log").read_bytes(), "t").binary


def test_a_huge_line_is_cut_and_the_next_line_still_read() -> None:
    stream = io.BytesIO(b"x" * (5 * 1024 * 1024) + b"\n" + b"RuntimeError: Failed to infer device type\n")
    ex = scan_stream(stream, "h")
    assert max(len(x.text) for x in ex.lines) <= MAX_LINE
    assert ex.lines[-1].text == "RuntimeError: Failed to infer device type"


def test_ansi_colour_and_carriage_returns_are_removed() -> None:
    ex = scan_bytes(b"\x1b[1;36m(EngineCore pid=1)\x1b[0m ERROR x\nLoading 10%\rLoading 90%\r\n", "c")
    texts = [x.text for x in ex.lines]
    assert texts == ["(EngineCore pid=1) ERROR x", "Loading 10%", "Loading 90%"]


def test_caseless_non_ascii_literals_are_anchors_the_screen_finds() -> None:
    """A CJK phrase has no case, so bytes.lower and str.lower agree on it: it can anchor a rule, and a line that
    holds nothing but it (a report written in Chinese) reaches the rule."""
    assert anchors("其他节点") == frozenset({"其他节点"})
    from forklift.doctor import Source, diagnose_sources

    text = "除了主节点，其他节点都报错：\nFileNotFoundError: [Errno 2] No such file or directory: '/data/run/out.log'"
    report = diagnose_sources([Source("t", scan_text([text]))])
    top = next(f for f in report.findings if f.severity != "info" and not f.superseded_by)
    assert (top.category, top.rule) == ("model_path_missing_on_worker", "file-missing-on-other-nodes")
