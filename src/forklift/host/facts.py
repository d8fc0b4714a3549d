"""``probe``: what is on one node, read once through its Runner (the same locally and over SSH) into ``HostFacts``.

Each part is one fixed command read by one parser in ``host.parse``; a part not asked for, or that could not be
read, is None (and its reason is kept in ``unread``). Sizes are bytes everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from forklift.errors import RunnerError
from forklift.host import parse
from forklift.host.parse import MIB, Gpu
from forklift.runner import Completed, Runner

Part = Literal["memory", "gpus", "disk", "ports", "kernel", "nccl", "cuda", "os", "nic"]
PARTS: tuple[Part, ...] = ("memory", "gpus", "disk", "ports", "kernel", "nccl", "cuda", "os", "nic")
STACK_PARTS: tuple[Part, ...] = ("gpus", "kernel", "nccl", "cuda", "os", "nic")
"""The host stack a run record pins per node: kernel, driver (with the GPUs), CUDA, NCCL, NIC firmware, OS."""
TIMEOUT_S = 30.0
T = TypeVar("T")


@dataclass(frozen=True)
class HostFacts:
    """One node as it is now. None: not asked for, or unreadable (``unread`` says why)."""

    host: str
    memory: Mapping[str, int] | None = None
    """/proc/meminfo in bytes (MemTotal, MemAvailable, Cached, ...)."""
    gpus: tuple[Gpu, ...] | None = None
    """nvidia-smi's GPUs; () on a node without nvidia-smi or GPUs."""
    driver: str | None = None
    disk_free: Mapping[str, int] = field(default_factory=dict)
    """Bytes available per path asked for."""
    listening: frozenset[int] | None = None
    kernel: str | None = None
    nccl: str | None = None
    """The system's libnccl.so.2 path (``ldconfig -p``)."""
    nccl_version: str | None = None
    """That library's version, from the file it resolves to (``libnccl.so.2.21.5``)."""
    cuda: str | None = None
    """The CUDA version the driver supports (nvidia-smi's header)."""
    os_release: str | None = None
    nic_firmware: Mapping[str, str] | None = None
    """RDMA device -> firmware version; {} on a node without RDMA devices."""
    unread: Mapping[str, str] = field(default_factory=dict)

    @property
    def mem_total(self) -> int | None:
        return (self.memory or {}).get("MemTotal")

    @property
    def mem_available(self) -> int | None:
        return (self.memory or {}).get("MemAvailable")

    @property
    def gpu_used_mib(self) -> list[int]:
        """MiB used per GPU that reports it (the baseline ``down`` compares against)."""
        return [g.used_bytes // MIB for g in self.gpus or () if g.used_bytes is not None]


def _run(runner: Runner, argv: Sequence[str]) -> Completed:
    """A missing command reads as exit 127, like a shell (nvidia-smi on a CPU node)."""
    try:
        return runner.run(argv, timeout=TIMEOUT_S)
    except RunnerError as exc:
        if "command not found" in exc.message:
            return Completed(runner.host, tuple(argv), 127, "", exc.message)
        raise


def _read(runner: Runner, argv: Sequence[str], unread: dict[str, str], part: str, *,
          partial: bool = False) -> str | None:
    """The command's output, or None (the reason kept in ``unread``); ``partial``: output of a failed command still
    counts (``cat`` of two files where one is missing)."""
    res = _run(runner, argv)
    if res.ok or (partial and res.stdout.strip()):
        return res.stdout
    unread[part] = f"`{' '.join(argv[:2])}` failed ({res.returncode}): {res.stderr.strip()[-200:]}"
    return None


def _then(text: str | None, parser: Callable[[str], T]) -> T | None:
    return None if text is None else parser(text)


def _gpus(runner: Runner, unread: dict[str, str]) -> tuple[tuple[Gpu, ...], str | None]:
    """No nvidia-smi, or one that cannot answer, is a node without GPUs it can see."""
    try:
        text = _read(runner, parse.NVIDIA_SMI, unread, "gpus")
    except RunnerError as exc:
        unread["gpus"] = exc.message
        text = None
    return parse.nvidia_gpus(text) if text is not None else ((), None)


def _nccl(runner: Runner, unread: dict[str, str]) -> tuple[str | None, str | None]:
    """(libnccl.so.2's path, its version from the file the link resolves to)."""
    path = _then(_read(runner, ["ldconfig", "-p"], unread, "nccl"), parse.nccl)
    if path is None:
        return None, None
    resolved = _read(runner, ["readlink", "-f", path], unread, "nccl")
    return path, _then(resolved, parse.nccl_version)


def _cuda(runner: Runner, unread: dict[str, str]) -> str | None:
    """The driver's CUDA version; an nvidia-smi that is missing or cannot answer leaves it unread, like ``gpus``."""
    try:
        return _then(_read(runner, ["nvidia-smi"], unread, "cuda"), parse.cuda_version)
    except RunnerError as exc:
        unread["cuda"] = exc.message
        return None


def _nic(runner: Runner, unread: dict[str, str]) -> dict[str, str] | None:
    """RDMA firmware per device; a node without /sys/class/infiniband has none ({}), not an unread part."""
    res = _run(runner, parse.RDMA_FIRMWARE)
    if res.ok or res.stdout.strip():
        return parse.rdma_firmware(res.stdout)
    if "No such file" in res.stderr:
        return {}
    unread["nic"] = f"`find /sys/class/infiniband` failed ({res.returncode}): {res.stderr.strip()[-200:]}"
    return None


def probe(runner: Runner, parts: Iterable[Part] = PARTS, *, disk_paths: Sequence[str] = ("/tmp",)) -> HostFacts:
    """Read the ``parts`` asked for, one command each (raises only for a node that cannot be reached)."""
    want = set(parts)
    unread: dict[str, str] = {}
    memory: dict[str, int] | None = None
    gpus: tuple[Gpu, ...] | None = None
    driver: str | None = None
    listening: frozenset[int] | None = None
    kernel = nccl = nccl_version = cuda = os_release = None
    nic: dict[str, str] | None = None
    disk: dict[str, int] = {}
    if "memory" in want:
        memory = _then(_read(runner, ["cat", "/proc/meminfo"], unread, "memory", partial=True), parse.meminfo)
    if "gpus" in want:
        gpus, driver = _gpus(runner, unread)
    for path in disk_paths if "disk" in want else ():
        free = _then(_read(runner, ["df", "-Pk", path], unread, "disk"), parse.df_free)
        if free is not None:
            disk[path] = free
    if "ports" in want:
        listening = _then(_read(runner, ["cat", "/proc/net/tcp", "/proc/net/tcp6"], unread, "ports", partial=True),
                          parse.listening_ports)
    if "kernel" in want:
        kernel = _then(_read(runner, ["uname", "-r"], unread, "kernel"), parse.kernel)
    if "nccl" in want:
        nccl, nccl_version = _nccl(runner, unread)
    if "cuda" in want:
        cuda = _cuda(runner, unread)
    if "os" in want:
        os_release = _then(_read(runner, ["cat", "/etc/os-release"], unread, "os"), parse.os_release)
    if "nic" in want:
        nic = _nic(runner, unread)
    return HostFacts(host=runner.host, memory=memory, gpus=gpus, driver=driver, disk_free=disk, listening=listening,
                     kernel=kernel, nccl=nccl, nccl_version=nccl_version, cuda=cuda, os_release=os_release,
                     nic_firmware=nic, unread=unread)
