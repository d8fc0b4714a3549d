"""The shipped gather program's sysfs readers on a sysfs-shaped folder (values from the gx10-interconnect GID table
capture, index id 61435571379), and the NCCL probe's decisions without a library."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from forklift.net import gather_program as gp
from forklift.net import parse

DATA = Path(__file__).resolve().parents[2] / "data" / "net"


def test_gid_table_reads_type_and_netdev_and_skips_empty_entries(tmp_path: Path) -> None:
    rows = re.findall(r"gid (\d+)\s+([0-9a-f:]{39})\s+(IB/RoCE v1|RoCE v2|-)",
                      (DATA / "gb10-gx10-interconnect-gids-ipv4-at-index5.TOOL-OUTPUT.txt").read_text())
    assert len(rows) == 7  # 0..5 and the empty 6
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (tmp_path / sub).mkdir(parents=True)
    for index, gid, kind in rows:
        (tmp_path / "gids" / index).write_text(gid + "\n")
        if kind != "-":  # the kernel answers EINVAL for an empty entry's type; no file here
            (tmp_path / "gid_attrs/types" / index).write_text(kind + "\n")
            (tmp_path / "gid_attrs/ndevs" / index).write_text("enp1s0f0np0\n")
    table = gp.gid_table(str(tmp_path))
    assert [g["index"] for g in table] == [0, 1, 2, 3, 4, 5]
    v2_ipv4 = [g["index"] for g in table if g["type"] == "RoCE v2" and parse.gid_ipv4(g["gid"])]
    assert v2_ipv4 == [5] and parse.gid_ipv4(table[5]["gid"]) == "192.168.100.10"
    assert {g["ndev"] for g in table} == {"enp1s0f0np0"}


def test_nccl_probe_without_torch_or_path_says_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_NCCL_SO_PATH", raising=False)
    monkeypatch.setattr(gp, "torch_cuda", lambda: None)
    assert gp.nccl() == {"status": "none", "how": "no torch"}
    monkeypatch.setattr(gp, "torch_cuda", lambda: False)
    assert gp.nccl()["how"] == "torch is not a CUDA build"
    monkeypatch.setenv("VLLM_NCCL_SO_PATH", "/nonexistent/libnccl.so.2")
    got = gp.nccl()
    assert got["status"] == "error" and got["how"] == "VLLM_NCCL_SO_PATH"
    assert "/nonexistent/libnccl.so.2" in got["error"]
