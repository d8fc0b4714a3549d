"""An N-node cluster on this machine: one network namespace per node, a real sshd in each.

Two nodes are joined by a veth pair; three or more by a bridge in a "switch" namespace (each node's ``fl0``
is one veth into it). ``add_link`` adds further point-to-point links between two nodes (other subnets under
10.231.x), for tests of interface choice, MTU and rate limits. Only the addresses created here (10.231.0.N on
``fl0``, 10.231.K.x on extra links) are ever targeted. Needs root, ``ip netns`` and Debian's openssh-server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.231.0"
IFNAME = "fl0"
SSHD = "/usr/sbin/sshd"


def unavailable_reason() -> str | None:
    """Why the namespace cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (creates network namespaces and runs sshd)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip`"
    if not Path(SSHD).is_file() or shutil.which("ssh-keygen") is None:
        return "needs openssh-server (apt-get install -y openssh-server)"
    probe = f"flprobe{os.getpid()}"
    res = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        return f"`ip netns add` is unavailable here: {res.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


@dataclass
class Node:
    ns: str
    ip: str
    sshd: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"root@{self.ip}"


@dataclass
class NetCluster:
    tmp: Path
    nodes: list[Node] = field(default_factory=list)
    extra_ns: list[str] = field(default_factory=list)
    """Namespaces that are not nodes (the switch), deleted with the cluster."""

    @property
    def ssh_config(self) -> Path:
        return self.tmp / "ssh_config"

    def exec_argv(self, index: int, *argv: str) -> list[str]:
        """argv run inside node index's namespace."""
        return ["ip", "netns", "exec", self.nodes[index].ns, *argv]

    def pids(self, index: int) -> list[int]:
        res = sh("ip", "netns", "pids", self.nodes[index].ns, check=False)
        return [int(p) for p in res.stdout.split()]

    def foreign_pids(self, index: int) -> list[int]:
        """Processes in the namespace other than sshd, its sessions and ssh multiplexing masters."""
        node = self.nodes[index]
        keep = {node.sshd.pid} if node.sshd else set()
        out = []
        for pid in self.pids(index):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if pid in keep or ppid in keep or cmd.startswith(("sshd", "ssh: ")):
                continue  # sshd, its sessions, and the ssh client's ControlMaster ("ssh: PATH [mux]")
            out.append(pid)
        return out

    def listening(self, index: int, port: int) -> bool:
        res = sh(*self.exec_argv(index, "cat", "/proc/net/tcp", "/proc/net/tcp6"), check=False)
        for line in res.stdout.splitlines()[1:]:
            parts = line.split()
            if len(parts) > 3 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                return True
        return False


def node_cores(n: int) -> list[str]:
    """The core each node's vLLM-CPU ranks compute on (VLLM_CPU_OMP_THREADS_BIND): node-a on this worker's own core
    (tests/conftest.py), the next nodes on the following ones. Without it every rank binds to core 0 (vLLM-CPU's
    auto-binding reserves the other cores for its frontend), so a pp=2 pair would compute on one core."""
    cpus = os.cpu_count() or 1
    bound = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")
    base = int(bound) if bound.isdigit() else 0
    return [str((base + i) % cpus) for i in range(n)]


def writable_venv(tmp: Path) -> Path:
    """The python of a hard-linked copy of this venv (made once under ``tmp``), for recipes that carry patches: the
    venv runtime applies them in place on every node, by atomic rename, so the copy's files change and the venv the
    rest of the suite runs on does not (the nodes share this machine's filesystem)."""
    copy = tmp / "venv-patchable"
    if not copy.exists():
        subprocess.run(["cp", "-al", sys.prefix, str(copy)], check=True, timeout=300)
    return copy / "bin" / "python"


def _keygen(path: Path) -> str:
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "forklift-test", "-f", str(path))
    return path.with_suffix(".pub").read_text().strip() if path.suffix else Path(f"{path}.pub").read_text().strip()


def _wire(names: list[str], tag: str) -> tuple[list[str], list[str]]:
    """Create the data links; returns (the veth end that goes into each node, extra namespaces made)."""
    if len(names) == 2:
        veths = [f"fva{tag}"[:15], f"fvb{tag}"[:15]]
        sh("ip", "link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        return veths, []
    switch = f"flsw{tag}"[:15]
    sh("ip", "netns", "add", switch)
    sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", switch, "link", "set", "br0", "up")
    ends = []
    for i in range(len(names)):
        node_end, sw_end = f"fv{i}{tag}"[:15], f"fs{i}{tag}"[:15]
        sh("ip", "link", "add", node_end, "type", "veth", "peer", "name", sw_end)
        sh("ip", "link", "set", sw_end, "netns", switch)
        sh("ip", "-n", switch, "link", "set", sw_end, "master", "br0")
        sh("ip", "-n", switch, "link", "set", sw_end, "up")
        ends.append(node_end)
    return ends, [switch]


def add_link(cluster: NetCluster, a: int, b: int, subnet: int, *, tag: str, name: str = "fl1",
             mtu: tuple[int, int] | None = None) -> tuple[str, str]:
    """A point-to-point veth link between nodes a and b named ``name`` in both, addresses 10.231.SUBNET.{a+1,b+1}
    (/24); ``mtu`` per end. Returns the two addresses."""
    ends = [f"fx{a}{b}{subnet}{tag}"[:15], f"fy{a}{b}{subnet}{tag}"[:15]]
    sh("ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
    addrs = []
    for k, (idx, end) in enumerate(((a, ends[0]), (b, ends[1]))):
        ns, ip = cluster.nodes[idx].ns, f"10.231.{subnet}.{idx + 1}"
        sh("ip", "link", "set", end, "netns", ns)
        sh("ip", "-n", ns, "link", "set", end, "name", name)
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", name)
        if mtu is not None:
            sh("ip", "-n", ns, "link", "set", name, "mtu", str(mtu[k]))
        sh("ip", "-n", ns, "link", "set", name, "up")
        addrs.append(ip)
    return addrs[0], addrs[1]


def start(tmp: Path, tag: str, sshd_env: dict[int, dict[str, str]] | None = None, *, n: int = 2,
          subnet: str = SUBNET) -> NetCluster:
    """``n`` nodes; sshd_env: per node index, variables sshd sets in every session there (sshd_config SetEnv);
    ``subnet``: the nodes' /24 (a module that starts no vLLM may take its own and run beside the shared one)."""
    cluster = NetCluster(tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    sshd_env = {i: {"VLLM_CPU_OMP_THREADS_BIND": core, **(sshd_env or {}).get(i, {})}
                for i, core in enumerate(node_cores(n))}
    client_pub = _keygen(tmp / "client_key")
    (tmp / "authorized_keys").write_text(client_pub + "\n")
    host_pub = _keygen(tmp / "host_key")
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    names = [f"fl{chr(ord('a') + i)}{tag}" for i in range(n)]
    for ns in names:
        sh("ip", "netns", "add", ns)
    try:
        veths, cluster.extra_ns = _wire(names, tag)
        known = []
        for i, (ns, veth) in enumerate(zip(names, veths, strict=True)):
            ip = f"{subnet}.{i + 1}"
            sh("ip", "link", "set", veth, "netns", ns)
            sh("ip", "-n", ns, "link", "set", veth, "name", IFNAME)
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", IFNAME)
            sh("ip", "-n", ns, "link", "set", IFNAME, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            known.append(f"{ip} {host_pub}")
            cfg = tmp / f"sshd_config_{i}"
            cfg.write_text("\n".join([
                f"ListenAddress {ip}", "Port 22", f"HostKey {tmp / 'host_key'}",
                f"AuthorizedKeysFile {tmp / 'authorized_keys'}", "PermitRootLogin prohibit-password",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
                f"PidFile {tmp / f'sshd_{i}.pid'}", "MaxStartups 200", "MaxSessions 200", "LogLevel ERROR",
                # one SetEnv line: sshd takes only the first of several
                "SetEnv " + " ".join(f"{k}={v}" for k, v in sshd_env[i].items()), "",
            ]))
            log = open(tmp / f"sshd_{i}.log", "wb")  # noqa: SIM115 - lives as long as sshd
            proc = subprocess.Popen(["ip", "netns", "exec", ns, SSHD, "-D", "-e", "-f", str(cfg)],
                                    stdout=log, stderr=subprocess.STDOUT)
            cluster.nodes.append(Node(ns, ip, proc))
        (tmp / "known_hosts").write_text("\n".join(known) + "\n")
        cluster.ssh_config.write_text("\n".join([
            f"Host {subnet}.*", "  User root", f"  IdentityFile {tmp / 'client_key'}", "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {tmp / 'known_hosts'}", "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes", "  LogLevel ERROR", "",
        ]))
        _wait_ssh(cluster)
    except BaseException:
        stop(cluster, names + [f"flsw{tag}"[:15]])
        raise
    return cluster


def _wait_ssh(cluster: NetCluster, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    for node in cluster.nodes:
        while True:
            res = sh(*cluster.exec_argv(0, "ssh", "-F", str(cluster.ssh_config), "-o", "BatchMode=yes",
                                        "-o", "ConnectTimeout=3", node.target, "true"), check=False)
            if res.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {node.ip} never answered: {res.stderr}")
            time.sleep(0.3)


def stop(cluster: NetCluster, names: list[str] | None = None) -> None:
    """Stop the sshds we started, then any process we left in our namespaces (by pid), then delete them."""
    for node in cluster.nodes:
        if node.sshd and node.sshd.poll() is None:
            node.sshd.terminate()
            try:
                node.sshd.wait(5)
            except subprocess.TimeoutExpired:
                node.sshd.kill()
    for ns in names or [*(n.ns for n in cluster.nodes), *cluster.extra_ns]:
        for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)
        sh("ip", "netns", "del", ns, check=False)
