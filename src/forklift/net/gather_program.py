"""Shipped to each node and run there as ``python -c SOURCE ARGS_JSON``: it prints one JSON object with the
node's raw network facts. It imports nothing from forklift (it runs alone on the node); forklift parses what it
prints (``forklift.net.parse``), so every format rule lives on one side and is unit-tested there.

ARGS_JSON: {"nccl": bool (probe the NCCL library vLLM would load), "routes": [ip, ...] (``ip -j route get``
each), "connect": [[ip, port, tries], ...] (TCP connects, timed), "timeout": seconds per connect}.

What it reads: ``ip -j addr``; /sys/class/net/* (mtu, operstate, speed, duplex, phys_port_name, the PCI
device, its link width/speed, the RDMA devices on it); /sys/class/infiniband/* (fw_ver, sys_image_guid, and per
port state, phys_state, rate, link_layer, the non-empty GIDs with their type and netdev); ``ethtool IF`` and
``ibv_devinfo -v`` when installed; /proc/net/tcp{,6} (the LISTEN ports); which tools exist.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
from typing import Any

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
REFUSED_GRACE_S = 1.5
TOOLS = ("ip", "ethtool", "ibv_devinfo", "iperf3", "ib_write_bw", "nft", "python3")


def read(path: str) -> str | None:
    try:
        with open(path, errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def run(argv: list[str], timeout: float = 10) -> dict[str, Any]:
    if shutil.which(argv[0]) is None:
        return {"rc": 127, "out": "", "err": f"{argv[0]}: not installed"}
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 124, "out": "", "err": str(exc)}
    return {"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr[-2000:]}


def netdev(name: str) -> dict[str, Any]:
    base = f"/sys/class/net/{name}"
    dev = os.path.realpath(f"{base}/device") if os.path.exists(f"{base}/device") else None
    out: dict[str, Any] = {key: read(f"{base}/{key}") for key in
                           ("mtu", "operstate", "speed", "duplex", "carrier", "address", "phys_port_name")}
    out["device"] = dev
    out["wireless"] = os.path.exists(f"{base}/wireless") or os.path.exists(f"{base}/phy80211")
    out["hcas"] = sorted(os.listdir(f"{base}/device/infiniband")) if os.path.isdir(f"{base}/device/infiniband") \
        else []
    if dev:
        out["pcie_width"] = read(f"{dev}/current_link_width")
        out["pcie_speed"] = read(f"{dev}/current_link_speed")
    return out


def gid_table(port_dir: str) -> list[dict[str, Any]]:
    out = []
    for path in glob.glob(f"{port_dir}/gids/*"):
        index = os.path.basename(path)
        gid = read(path)
        if not index.isdigit() or gid is None or gid == ZERO_GID:
            continue
        out.append({"index": int(index), "gid": gid, "type": read(f"{port_dir}/gid_attrs/types/{index}"),
                    "ndev": read(f"{port_dir}/gid_attrs/ndevs/{index}")})
    return sorted(out, key=lambda g: g["index"])


def rdma() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hca_dir in sorted(glob.glob("/sys/class/infiniband/*")):
        ports: dict[str, Any] = {}
        for port_dir in sorted(glob.glob(f"{hca_dir}/ports/*")):
            ports[os.path.basename(port_dir)] = {
                **{key: read(f"{port_dir}/{key}") for key in ("state", "phys_state", "rate", "link_layer")},
                "gids": gid_table(port_dir)}
        nets = sorted(os.listdir(f"{hca_dir}/device/net")) if os.path.isdir(f"{hca_dir}/device/net") else []
        out[os.path.basename(hca_dir)] = {"fw_ver": read(f"{hca_dir}/fw_ver"),
                                          "sys_image_guid": read(f"{hca_dir}/sys_image_guid"),
                                          "netdevs": nets, "ports": ports}
    return out


def proc_net_tcp() -> str:
    """/proc/net/tcp and tcp6 as they are (forklift reads the LISTEN ports with ``host.parse.listening_ports``)."""
    return "\n".join(read(name) or "" for name in ("/proc/net/tcp", "/proc/net/tcp6"))


def elf_build_id(path: str) -> str | None:
    """The GNU build id from an ELF file's PT_NOTE segments (64-bit little-endian only), or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            phoff, = struct.unpack_from("<Q", head, 32)
            phentsize, phnum = struct.unpack_from("<HH", head, 54)
            for i in range(phnum):
                fh.seek(phoff + i * phentsize)
                p_type, _flags, p_offset = struct.unpack("<IIQ", fh.read(16))
                fh.seek(phoff + i * phentsize + 32)
                p_filesz, = struct.unpack("<Q", fh.read(8))
                if p_type != 4:
                    continue
                fh.seek(p_offset)
                notes, pos = fh.read(min(p_filesz, 4096)), 0
                while pos + 12 <= len(notes):
                    namesz, descsz, ntype = struct.unpack_from("<III", notes, pos)
                    name_end = pos + 12 + ((namesz + 3) & ~3)
                    if ntype == 3 and notes[pos + 12:pos + 12 + namesz].rstrip(b"\0") == b"GNU":
                        return notes[name_end:name_end + descsz].hex()
                    pos = name_end + ((descsz + 3) & ~3)
    except (OSError, struct.error):
        return None
    return None


def torch_cuda() -> bool | None:
    """Whether this Python's torch is a CUDA build (read from torch/version.py, without importing torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    text = read(os.path.join(list(spec.submodule_search_locations)[0], "version.py")) or ""
    for line in text.splitlines():
        if line.startswith("cuda"):
            return "None" not in line.split("=", 1)[-1]
    return None


def loaded_path(soname: str) -> str | None:
    for line in (read("/proc/self/maps") or "").splitlines():
        path = line.split(None, 5)[-1] if len(line.split(None, 5)) == 6 else ""
        if os.path.basename(path).startswith(soname.split(".so")[0] + ".so"):
            return path
    return None


def nccl() -> dict[str, Any]:
    """The NCCL library vLLM would load here (vllm/utils/nccl.py find_nccl_library: VLLM_NCCL_SO_PATH, else the
    soname libnccl.so.2 dlopen'ed after torch is imported) and its ncclGetVersion code."""
    forced = os.environ.get("VLLM_NCCL_SO_PATH")
    cuda = torch_cuda()
    if not forced and not cuda:
        return {"status": "none", "how": "no torch" if cuda is None else "torch is not a CUDA build"}
    how = "VLLM_NCCL_SO_PATH" if forced else "libnccl.so.2 after import torch"
    try:
        if not forced:
            import torch  # noqa: F401 - torch's own NCCL (the wheel's) must be loaded first, as in vLLM
        lib = ctypes.CDLL(forced or "libnccl.so.2")
        code = ctypes.c_int()
        rc = lib.ncclGetVersion(ctypes.byref(code))
    except (OSError, AttributeError, ImportError) as exc:
        return {"status": "error", "how": how, "error": f"{type(exc).__name__}: {exc}"}
    path = loaded_path("libnccl.so") or (os.path.realpath(forced) if forced else None)
    size = os.path.getsize(path) if path and os.path.exists(path) else None
    return {"status": "found", "how": how, "rc": rc, "code": code.value, "path": path,
            "realpath": os.path.realpath(path) if path else None, "size": size,
            "build_id": elf_build_id(path) if path else None}


def connect(ip: str, port: int, tries: int, timeout: float) -> dict[str, Any]:
    """``tries`` timed TCP connects; a refusal is retried for ``REFUSED_GRACE_S`` (the listener may be starting)."""
    rtts: list[float] = []
    error = None
    grace = time.monotonic() + REFUSED_GRACE_S
    while len(rtts) < max(1, tries):
        t0 = time.monotonic()
        try:
            with socket.create_connection((ip, port), timeout=timeout):
                rtts.append((time.monotonic() - t0) * 1000)
        except TimeoutError:
            error = "timeout"
            break
        except ConnectionRefusedError:
            if time.monotonic() < grace:
                time.sleep(0.1)
                continue
            error = "refused"
            break
        except OSError as exc:
            error = exc.strerror or str(exc)
            break
    return {"ip": ip, "port": port, "rtt_ms": rtts, "error": error}


def listen(pairs: list[list[Any]], seconds: float, expect: int) -> dict[str, Any]:
    """Accept TCP connections on each (ip, port) until ``expect`` arrived or ``seconds`` passed."""
    socks, bound, errors = [], [], {}
    for ip, port in pairs:
        sock = socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, int(port)))
            sock.listen(64)
        except OSError as exc:
            errors[f"{ip}:{port}"] = exc.strerror or str(exc)
            sock.close()
            continue
        sock.settimeout(0.05)
        socks.append(sock)
        bound.append(f"{ip}:{port}")
    print(json.dumps({"bound": bound, "errors": errors}), flush=True)
    accepted, deadline = 0, time.monotonic() + seconds
    while socks and accepted < expect and time.monotonic() < deadline:
        for sock in socks:
            try:
                conn, _ = sock.accept()
                conn.close()
                accepted += 1
            except (TimeoutError, BlockingIOError):
                continue
    for sock in socks:
        sock.close()
    return {"bound": bound, "errors": errors, "accepted": accepted}


def main(args: dict[str, Any]) -> dict[str, Any]:
    if args.get("listen"):
        return listen(args["listen"], float(args.get("listen_s", 8)), int(args.get("expect", 1)))
    out: dict[str, Any] = {"hostname": socket.gethostname(), "tools": {t: shutil.which(t) for t in TOOLS}}
    if args.get("facts", True):
        out["ip_addr"] = run(["ip", "-j", "addr"])
        out["ip_route_default"] = run(["ip", "-j", "route", "show", "default"])
        names = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
        out["netdevs"] = {name: netdev(name) for name in names}
        out["ethtool"] = {n: run(["ethtool", n], 5) for n, d in out["netdevs"].items()
                          if d["device"] and out["tools"]["ethtool"]}
        out["rdma"] = rdma()
        out["ibv_devinfo"] = run(["ibv_devinfo", "-v"]) if out["tools"]["ibv_devinfo"] and out["rdma"] else None
        out["proc_net_tcp"] = proc_net_tcp()
    if args.get("nccl"):
        out["nccl"] = nccl()
    out["routes"] = {ip: run(["ip", "-j", "route", "get", ip]) for ip in args.get("routes", [])}
    timeout = float(args.get("timeout", 2.0))
    out["connects"] = [connect(ip, int(port), int(tries), timeout) for ip, port, tries in args.get("connect", [])]
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})))
