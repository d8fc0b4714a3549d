"""The host stack: parsers for the facts it adds, drift across nodes, and the known-bad table."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from forklift.host import parse
from forklift.host.facts import HostFacts
from forklift.host.stack import (
    FACTS,
    KnownBad,
    drift,
    known_bad,
    known_bad_table,
    stack_checks,
    stack_of,
    version_key,
)

DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n'


def test_parsers_of_the_stack_facts() -> None:
    assert parse.os_release(DEBIAN) == "Debian GNU/Linux 12 (bookworm)"
    assert parse.os_release('NAME="Fedora Linux"\nVERSION_ID=40\n') == "Fedora Linux 40"
    assert parse.os_release("") is None
    assert parse.nccl_version("/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4\n") == "2.23.4"
    assert parse.nccl_version("/usr/lib/x86_64-linux-gnu/libnccl.so.2") is None  # not resolved to a versioned file
    assert parse.nccl_version("/usr/lib/libcuda.so.570.86.15") is None
    header = "| NVIDIA-SMI 551.78                 Driver Version: 551.78         CUDA Version: 12.4     |"
    assert parse.cuda_version(header) == "12.4" and parse.cuda_version("No devices were found") is None
    assert parse.rdma_firmware("/sys/class/infiniband/rocep1s0f0/fw_ver:28.45.4028\nnoise\n") == \
        {"rocep1s0f0": "28.45.4028"}


def _facts(host: str, **kw: Any) -> HostFacts:
    return HostFacts(host=host, **kw)


def test_stack_of_keeps_what_was_read_in_order() -> None:
    facts = _facts("a", kernel="6.8.0-45-generic", driver="570.86.15", nccl="/lib/libnccl.so.2",
                   nccl_version="2.21.5", cuda="12.8", os_release="Ubuntu 24.04.3 LTS",
                   nic_firmware={"mlx5_0": "28.45.4028"})
    stack = stack_of(facts)
    assert list(stack) == list(FACTS)
    assert stack["nccl"] == "2.21.5" and stack["nic_firmware"] == "mlx5_0 28.45.4028"
    assert stack_of(_facts("cpu", kernel="6.1.0", nic_firmware={})) == {"kernel": "6.1.0"}
    assert stack_of(_facts("b", nccl="/lib/libnccl.so.2"))["nccl"] == "/lib/libnccl.so.2"  # unversioned: the path


def test_drift_names_each_fact_that_differs_and_ignores_unread_and_device_names() -> None:
    stacks = {"a": {"kernel": "6.8.0-45-generic", "driver": "570.86.15", "nic_firmware": "mlx5_0 28.45.4028"},
              "b": {"kernel": "6.8.0-47-generic", "driver": "570.86.15", "nic_firmware": "rocep1s0f0 28.45.4028"},
              "c": {"driver": "570.86.15"}}
    assert drift(stacks) == {"kernel": {"a": "6.8.0-45-generic", "b": "6.8.0-47-generic"}}
    stacks["c"]["nic_firmware"] = "mlx5_0 28.39.1002"
    assert set(drift(stacks)) == {"kernel", "nic_firmware"}
    assert drift({"a": {"kernel": "x"}}) == {}


def test_version_ranges_and_patterns() -> None:
    assert version_key("6.17.0-1008-nvidia") == (6, 17, 0, 1008)
    ranged = KnownBad(id="r", fact="nccl", since="2.19.0", below="2.27.5", breaks="b", fix="f", threads=("t",))
    assert ranged.matches("2.19.3") and ranged.matches("2.27.4") and not ranged.matches("2.27.5")
    assert not ranged.matches("2.18.1") and not ranged.matches("/lib/libnccl.so.2")
    glob = KnownBad(id="g", fact="driver", versions=("560.*",), breaks="b", fix="f", threads=("t",))
    assert glob.matches("560.35.03") and not glob.matches("565.57.01") and not glob.matches("1560.1")
    with pytest.raises(ValidationError):
        KnownBad(id="both", fact="driver", versions=("1",), below="2", breaks="b", fix="f", threads=("t",))
    with pytest.raises(ValidationError):
        KnownBad(id="no-thread", fact="driver", versions=("1",), breaks="b", fix="f", threads=())


def test_the_bundled_table_reads_and_every_entry_cites_a_thread_and_a_fix() -> None:
    table = known_bad_table()
    assert len({e.id for e in table}) == len(table) >= 5
    for entry in table:
        assert entry.fix and entry.breaks and all(t.startswith("https://") for t in entry.threads)


def test_the_spark_kernel_that_broke_nccl_registration_is_caught_and_its_neighbours_are_not() -> None:
    stacks = {"spark-1": {"kernel": "7.0.0-1019-nvidia", "driver": "580.173.02"},
              "spark-2": {"kernel": "6.17.0-1032-nvidia", "driver": "580.173.02"},
              "x86": {"kernel": "7.0.0-1019-generic"}}
    hits = known_bad(stacks)
    assert [(h.host, h.entry.id) for h in hits] == [("spark-1", "spark-kernel-7.0.0-1019-cma")]
    assert "6.17.0-1032-nvidia" in hits[0].entry.fix and "kho=off" in hits[0].entry.fix


def test_nic_firmware_matches_per_device() -> None:
    entry = KnownBad(id="fw", fact="nic_firmware", versions=("28.39.*",), breaks="b", fix="f", threads=("t",))
    hits = known_bad({"a": {"nic_firmware": "mlx5_0 28.45.4028, mlx5_1 28.39.1002"}}, [entry])
    assert [h.value for h in hits] == ["28.39.1002"]


def test_checks_warn_on_drift_and_known_bad_naming_the_node_and_pass_the_rest() -> None:
    stacks = {"node-a": {"kernel": "6.17.0-1032-nvidia", "driver": "580.173.02"},
              "node-b": {"kernel": "7.0.0-1019-nvidia", "driver": "580.173.02"},
              "node-c": {"kernel": "6.17.0-1032-nvidia", "driver": "580.173.02"}}
    checks = stack_checks(stacks, head="node-a")
    warns = [(c.id, c.host) for c in checks if c.status == "warn"]
    assert warns == [("host stack", "node-b"), ("known-bad host stack", "node-b")]
    drifted = checks[0]
    assert "kernel differs across nodes" in drifted.summary and "node-b has 7.0.0-1019-nvidia" in drifted.summary
    bad = checks[1]
    assert "7.0.0-1019-nvidia on node-b is known to break" in bad.summary and "ibv_reg_mr_iova2" in bad.summary
    assert bad.fix and "https://github.com/MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks/issues/14" in bad.fix
    assert sorted(c.host or "" for c in checks if c.status == "ok") == ["node-a", "node-c"]
    assert all(c.status == "ok" for c in stack_checks({"a": stacks["node-a"], "c": stacks["node-c"]}, head="a"))
