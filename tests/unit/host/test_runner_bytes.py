"""Command output that is not UTF-8 (a log cut inside a character, a binary dmesg line) is text, never a crash."""

from __future__ import annotations

from pathlib import Path

from forklift.host import remote
from forklift.runner import LocalRunner


def test_non_utf8_output_reads_as_replacement_characters() -> None:
    res = LocalRunner().run(["printf", "ok \\210 \\342\\226"])  # a lone continuation byte, a cut 3-byte character
    assert res.returncode == 0
    assert res.stdout.startswith("ok \ufffd ") and res.stdout.endswith("\ufffd")


def test_read_from_keeps_byte_offsets_when_the_last_character_is_cut(tmp_path: Path) -> None:
    log = tmp_path / "rank.log"
    bar = "loading ██████\n".encode()
    log.write_bytes(bar + "next █".encode()[:-1])  # the writer is mid-character
    lines, offset = remote.read_from(LocalRunner(), str(log), 0)
    assert lines == ["loading ██████"] and offset == len(bar)
    with log.open("ab") as fh:
        fh.write("█".encode()[-1:] + b"\n")
    lines, offset = remote.read_from(LocalRunner(), str(log), offset)
    assert lines == ["next █"] and offset == log.stat().st_size
