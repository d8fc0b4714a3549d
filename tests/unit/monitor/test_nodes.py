"""Node facts from one command's output: meminfo, loadavg, nvidia-smi rows, the guard log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from forklift.errors import HostUnreachableError
from forklift.monitor import nodes
from forklift.node.facts import GUARD_LOG
from forklift.runner import Completed, FakeRunner

MEMINFO = """\
MemTotal:       130000000 kB
MemFree:         1000000 kB
MemAvailable:   90000000 kB
SwapTotal:       8388604 kB
SwapFree:        8000000 kB
"""
# Row 0: what nvidia-smi 580.159.04 printed for GPU_FIELDS on an idle H200 (2026-12-01); row 1: a GB10-style row
# (unified memory: nvidia-smi reports memory and power as [N/A]), written by hand in the same format.
SMI = """\
0, NVIDIA H200, 0, 0, 143771, 39, 78.82, 345
1, NVIDIA GB10, 3, [N/A], [N/A], 45, [N/A], 2418
"""
SEP = "--forklift-monitor--\n"


def _answer(gpus: str = SMI, guard: str = "") -> str:
    return MEMINFO + SEP + "0.52 0.40 0.30 1/123 4567\n" + SEP + gpus + SEP + guard


def test_a_gpu_node_reads_memory_load_gpus_and_guard_events() -> None:
    runner = FakeRunner("spark-a").on(["sh", "-c"], stdout=_answer(guard="2026-12-01 guard dropped caches\n"))
    s = nodes.sample(runner)
    assert s.error is None and s.host == "spark-a"
    assert s.mem_available_bytes == 90000000 * 1024 and s.mem_total_bytes == 130000000 * 1024
    assert s.swap_used_bytes == (8388604 - 8000000) * 1024 and s.load_1m == 0.52
    h200, gb10 = s.gpus
    assert (h200.index, h200.name, h200.utilization_pct, h200.memory_used_mib, h200.memory_total_mib,
            h200.temperature_c, h200.power_w, h200.sm_clock_mhz) == (0, "NVIDIA H200", 0, 0, 143771, 39, 78.82, 345)
    assert gb10.memory_used_mib is None and gb10.power_w is None and gb10.temperature_c == 45  # unified memory
    assert s.guard_events == ("2026-12-01 guard dropped caches",)
    argv = runner.calls[0].argv
    assert argv[-2:] == (GUARD_LOG, "3")  # the log path travels as an argument, not in the script


def test_a_node_without_nvidia_smi_has_no_gpus() -> None:
    s = nodes.sample(FakeRunner("cpu").on(["sh", "-c"], stdout=_answer(gpus="")))
    assert s.gpus == () and s.error is None and s.to_json()["gpus"] == []


def test_unreachable_and_failing_nodes_come_back_with_an_error() -> None:
    class Down(FakeRunner):
        def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
                input: str | None = None) -> Completed:
            raise HostUnreachableError("spark-b: ssh: connect timed out", host="spark-b")

    assert "timed out" in (nodes.sample(Down("spark-b")).error or "")
    failed = nodes.sample(FakeRunner("x").on(["sh"], stderr="boom", returncode=2))
    assert failed.error is not None and "boom" in failed.error
    assert nodes.parse("x", "garbage").error == "the node's answer was cut short"


def test_the_program_runs_on_this_machine() -> None:
    from forklift.runner import LocalRunner

    s = nodes.sample(LocalRunner())
    assert s.error is None and s.mem_total_bytes and s.mem_available_bytes is not None


def test_the_program_as_an_h200_node_answered_it() -> None:
    from tests.helpers import DATA

    s = nodes.parse("h200", (DATA / "monitor" / "node-program-h200.txt").read_text())
    assert s.error is None and s.mem_total_bytes == 131961788 * 1024 and s.swap_used_bytes == 0
    (gpu,) = s.gpus
    assert (gpu.name, gpu.memory_total_mib, gpu.temperature_c, gpu.power_w, gpu.sm_clock_mhz) == (
        "NVIDIA H200", 143771, 35, 76.89, 345)
    assert s.guard_events == ()  # no guard installed there
