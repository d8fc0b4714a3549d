"""One parser per host fact, each from the text of one fixed command, every size in bytes.

Pure functions over text (no processes): ``probe`` runs the commands, these read what they printed.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20

NVIDIA_SMI = ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.free,memory.used,driver_version",
              "--format=csv,noheader,nounits"]
"""The one nvidia-smi query: sizes in MiB (``[N/A]`` where the GPU has no memory of its own, as on GB10)."""


@dataclass(frozen=True)
class Gpu:
    """One accelerator as nvidia-smi reports it; a size is None where it reports none (unified memory)."""

    index: int
    name: str
    total_bytes: int | None
    free_bytes: int | None
    used_bytes: int | None


def meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo in bytes, keyed as there (MemTotal, MemAvailable, Cached, ...); unitless counts kept as is."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def _mib(field: str) -> int | None:
    return int(field) * MIB if field.isdigit() else None


def nvidia_gpus(text: str) -> tuple[tuple[Gpu, ...], str | None]:
    """The GPUs of ``NVIDIA_SMI``'s output and the driver version (None when no line reads)."""
    gpus: list[Gpu] = []
    driver: str | None = None
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6 or not parts[0].isdigit():
            continue
        gpus.append(Gpu(int(parts[0]), parts[1], _mib(parts[2]), _mib(parts[3]), _mib(parts[4])))
        driver = driver or (parts[5] if parts[5] not in ("", "[N/A]") else None)
    return tuple(gpus), driver


def df_free(text: str) -> int | None:
    """Bytes available from ``df -Pk PATH``'s last row, or None."""
    rows = text.strip().splitlines()
    if len(rows) < 2:
        return None
    fields = rows[-1].split()
    return int(fields[3]) * 1024 if len(fields) > 3 and fields[3].isdigit() else None


def listening_ports(text: str) -> frozenset[int]:
    """TCP ports in LISTEN state from /proc/net/tcp and /proc/net/tcp6 (header lines skipped)."""
    ports: set[int] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[3] == "0A" and ":" in parts[1]:
            ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return frozenset(ports)


def kernel(text: str) -> str | None:
    """``uname -r``: the kernel release."""
    return text.strip() or None


def nccl(text: str) -> str | None:
    """The system's libnccl.so.2 from ``ldconfig -p`` (what a process gets without a bundled NCCL), or None."""
    for line in text.splitlines():
        name, _, path = line.partition("=>")
        if name.strip().startswith("libnccl.so.2") and path.strip():
            return path.strip()
    return None


def nccl_version(resolved: str) -> str | None:
    """The NCCL version from the file ``readlink -f`` gives for libnccl.so.2 (``libnccl.so.2.21.5``), or None."""
    name = resolved.strip().rsplit("/", 1)[-1]
    head, sep, tail = name.partition(".so.")
    parts = tail.split(".")
    if not sep or not head.startswith("libnccl") or len(parts) < 3 or not all(p.isdigit() for p in parts[:3]):
        return None
    return ".".join(parts[:3])


def cuda_version(text: str) -> str | None:
    """The CUDA version the driver supports, from plain ``nvidia-smi``'s header (``CUDA Version: 12.8``)."""
    for line in text.splitlines():
        _, sep, rest = line.partition("CUDA Version:")
        if sep and (value := rest.strip().split(" ")[0].strip("|").strip()):
            return value
    return None


def os_release(text: str) -> str | None:
    """/etc/os-release's PRETTY_NAME (else NAME and VERSION_ID), unquoted."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    if fields.get("PRETTY_NAME"):
        return fields["PRETTY_NAME"]
    named = " ".join(v for v in (fields.get("NAME"), fields.get("VERSION_ID")) if v)
    return named or None


RDMA_FIRMWARE = ["find", "-L", "/sys/class/infiniband", "-mindepth", "2", "-maxdepth", "2", "-name", "fw_ver",
                 "-exec", "grep", "-H", ".", "{}", "+"]
"""Every RDMA device's firmware (ConnectX and other verbs devices), one ``PATH:VERSION`` line each."""


def rdma_firmware(text: str) -> dict[str, str]:
    """Device -> firmware version from ``RDMA_FIRMWARE``'s ``/sys/class/infiniband/mlx5_0/fw_ver:28.39.1002`` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        path, sep, version = line.partition(":")
        parts = path.split("/")
        if sep and version.strip() and len(parts) >= 2 and parts[-1] == "fw_ver":
            out[parts[-2]] = version.strip()
    return dict(sorted(out.items()))
