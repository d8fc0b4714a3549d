"""host: one parser per fact (bytes everywhere) and one probe that reads them through the Runner."""

from __future__ import annotations

from forklift.errors import RunnerError
from forklift.host import parse
from forklift.host.facts import HostFacts, probe
from forklift.runner import FakeRunner

GIB = 1 << 30
MIB = 1 << 20
MEMINFO = "MemTotal:       131072000 kB\nMemFree:          100 kB\nMemAvailable:    6553600 kB\nHugePages_Total: 0\n"
SMI = "0, NVIDIA H200, 143771, 143000, 771, 570.86.15\n1, NVIDIA H200, 143771, 1000, 142771, 570.86.15\n"
GB10 = "0, NVIDIA GB10, [N/A], [N/A], [N/A], 580.95.05\n"
TCP = ("  sl  local_address rem_address   st\n"
       "   0: 00000000:1F90 00000000:0000 0A 00000000:00000000\n"
       "   1: 0100007F:D431 0100007F:1F90 01 00000000:00000000\n")
DF = "Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/sda1 1000 10 2097152 1% /\n"


def test_meminfo_is_bytes_keyed_as_the_kernel_keys_it() -> None:
    mem = parse.meminfo(MEMINFO)
    assert mem["MemTotal"] == 131072000 * 1024 and mem["MemAvailable"] == 6553600 * 1024
    assert mem["HugePages_Total"] == 0
    assert parse.meminfo("garbage") == {}


def test_nvidia_smi_rows_read_in_bytes_with_the_driver() -> None:
    gpus, driver = parse.nvidia_gpus(SMI)
    assert [g.index for g in gpus] == [0, 1] and driver == "570.86.15"
    assert gpus[1].used_bytes == 142771 * MIB and gpus[0].total_bytes == 143771 * MIB


def test_unified_memory_gpus_have_no_sizes_of_their_own() -> None:
    gpus, driver = parse.nvidia_gpus(GB10)
    assert gpus[0].name == "NVIDIA GB10" and gpus[0].total_bytes is None and driver == "580.95.05"


def test_ports_disk_kernel_and_nccl() -> None:
    assert parse.listening_ports(TCP) == frozenset({8080})
    assert parse.df_free(DF) == 2097152 * 1024 and parse.df_free("") is None
    assert parse.kernel("6.8.0-1015-nvidia\n") == "6.8.0-1015-nvidia"
    ldconfig = "\tlibnccl.so.2 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libnccl.so.2\n"
    assert parse.nccl(ldconfig) == "/usr/lib/aarch64-linux-gnu/libnccl.so.2" and parse.nccl("") is None


SMI_HEADER = ("+-----------------------------------------------------------------------------------------+\n"
              "| NVIDIA-SMI 570.133.20             Driver Version: 570.133.20     CUDA Version: 12.8     |\n")
"""The header line as captured in tests/data/doctor/corpus/vllm-18995-rtx5090-no-kernel-image.log."""
LDCONFIG = "\tlibnccl.so.2 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnccl.so.2\n"
OS_RELEASE = 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
RDMA = "/sys/class/infiniband/mlx5_0/fw_ver:28.45.4028\n/sys/class/infiniband/mlx5_1/fw_ver:28.45.4028\n"


def _node() -> FakeRunner:
    return (FakeRunner("node-a").on(["cat", "/proc/meminfo"], stdout=MEMINFO).on(parse.NVIDIA_SMI, stdout=SMI)
            .on(["nvidia-smi"], stdout=SMI_HEADER).on(["df"], stdout=DF).on(["cat", "/proc/net/tcp"], stdout=TCP)
            .on(["uname"], stdout="6.8.0\n").on(["ldconfig"], stdout=LDCONFIG)
            .on(["readlink"], stdout="/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5\n")
            .on(["cat", "/etc/os-release"], stdout=OS_RELEASE).on(["find"], stdout=RDMA))


def test_one_probe_reads_every_part_once() -> None:
    runner = _node()
    found = probe(runner)
    assert isinstance(found, HostFacts) and found.host == "node-a"
    assert found.mem_available == 6553600 * 1024 and found.mem_total == 131072000 * 1024
    assert found.gpu_used_mib == [771, 142771] and found.driver == "570.86.15"
    assert found.disk_free == {"/tmp": 2097152 * 1024} and found.listening == frozenset({8080})
    assert found.kernel == "6.8.0" and found.nccl == "/lib/x86_64-linux-gnu/libnccl.so.2"
    assert found.nccl_version == "2.21.5" and found.cuda == "12.8" and found.os_release == "Ubuntu 24.04.3 LTS"
    assert found.nic_firmware == {"mlx5_0": "28.45.4028", "mlx5_1": "28.45.4028"} and not found.unread
    assert runner.ran("readlink", "-f") and runner.ran("readlink")[0].argv[-1] == "/lib/x86_64-linux-gnu/libnccl.so.2"
    assert len(runner.calls) == 10


def test_a_node_without_rdma_devices_has_no_nic_firmware_and_no_nccl_without_the_library() -> None:
    runner = (FakeRunner("cpu-node").on(["find"], returncode=1,
                                        stderr="find: '/sys/class/infiniband': No such file or directory")
              .on(["ldconfig"], stdout="\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n"))
    found = probe(runner, ("nic", "nccl"))
    assert found.nic_firmware == {} and found.nccl is None and found.nccl_version is None
    assert not found.unread and not runner.ran("readlink")


def test_an_unreadable_rdma_listing_is_unread_not_empty() -> None:
    found = probe(FakeRunner("n").on(["find"], returncode=1, stderr="find: permission denied"), ("nic",))
    assert found.nic_firmware is None and "permission denied" in found.unread["nic"]


def test_only_the_parts_asked_for_are_read() -> None:
    runner = _node()
    found = probe(runner, ("memory",))
    assert [c.argv[:2] for c in runner.calls] == [("cat", "/proc/meminfo")]
    assert found.gpus is None and found.listening is None


def test_a_node_without_nvidia_smi_has_no_gpus_and_says_why() -> None:
    runner = FakeRunner("cpu-node").on(["nvidia-smi"], returncode=127, stderr="nvidia-smi: not found")
    found = probe(runner, ("gpus",))
    assert found.gpus == () and found.gpu_used_mib == [] and "nvidia-smi" in found.unread["gpus"]


def test_an_nvidia_smi_that_cannot_answer_leaves_cuda_unread_and_the_probe_standing() -> None:
    def hung(argv: object) -> str:
        raise RunnerError("nvidia-smi timed out after 30 s")

    runner = FakeRunner("gpu-node").on(["nvidia-smi"], stdout=hung).on(["uname"], stdout="6.8.0\n")
    found = probe(runner, ("cuda", "kernel"))
    assert found.cuda is None and "timed out" in found.unread["cuda"] and found.kernel == "6.8.0"
