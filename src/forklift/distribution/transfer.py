"""How bytes move between hosts, and how fast.

Three ways, chosen per target:
- ``rsync`` from this machine to a node over the node's ssh target (the control network);
- ``rsync-node``: rsync started on the node that has the files, to the target's ``data_ip`` (the data network),
  when ssh from that node to the target works without a password (checked first, never assumed);
- ``relay``: through this machine, streamed (``tail -c +N`` on the source into ``cat >>`` on the target through
  two ssh sessions, no temp file here), when nodes cannot ssh to each other.
All three resume: rsync with ``--partial --append-verify`` (the receiving side's partial file grows, and the whole
file is checksummed after appending), the relay by continuing each file from the size the target already has
(and comparing sha256 on both ends for a file it continued). Progress is measured where the bytes land.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from forklift.distribution import jobs
from forklift.distribution.modelfiles import remote_listing
from forklift.errors import RunnerError, TransferError
from forklift.recipe.schema import Node
from forklift.runner import LocalRunner, Runner
from forklift.runner.ssh import SshRunner, split_target

CHUNK = 1 << 20
NODE_SSH_TIMEOUT_S = 10


@dataclass(frozen=True)
class Progress:
    """How far one node is: bytes landed of the bytes it needs, and the recent rate."""

    host: str
    phase: str
    """'pull' (from the Hub), 'sync' (from another copy) or 'image'."""
    done: int
    total: int
    rate: float
    """Bytes per second over the last few seconds."""


ProgressFn = Callable[[Progress], None]


def no_progress(p: Progress) -> None:
    return None


class Rate:
    """Bytes per second from successive (bytes, time) samples, smoothed."""

    def __init__(self) -> None:
        self.last: tuple[int, float] | None = None
        self.value = 0.0

    def update(self, done: int, t: float | None = None) -> float:
        t = time.monotonic() if t is None else t
        if self.last is not None and t > self.last[1]:
            now = max(0.0, (done - self.last[0]) / (t - self.last[1]))
            self.value = now if self.value == 0 else 0.5 * self.value + 0.5 * now
        self.last = (done, t)
        return self.value


@dataclass(frozen=True)
class Site:
    """A copy of the model (or where one should go): a directory on a host."""

    host: str
    runner: Runner
    path: str
    node: Node | None = None
    """None: this machine (not a node of the recipe)."""

    @property
    def here(self) -> bool:
        return isinstance(self.runner, LocalRunner)


def stream_argv(runner: Runner, argv: Sequence[str]) -> list[str]:
    """argv as this machine runs it to stream through the runner's host (ssh for a remote host)."""
    if isinstance(runner, SshRunner):
        return [*runner.base_argv(), runner.remote_command(argv)]
    if isinstance(runner, LocalRunner):
        return list(argv)
    raise RunnerError(f"{runner.host}: cannot stream through a {type(runner).__name__}",
                      fix="Streams need the local or the ssh runner.")


def data_address(node: Node) -> tuple[str, int | None]:
    """``user@data_ip`` (the ssh target's user, the data network's address) and the ssh port, for node-to-node
    copies; the ssh target itself when the node has no data_ip."""
    target, port = split_target(node.ssh or node.host)
    user = target.rpartition("@")[0]
    if node.data_ip:
        return (f"{user}@{node.data_ip}" if user else node.data_ip), port
    return target, port


def node_ssh_argv(config: str | None, port: int | None) -> list[str]:
    """The ssh a node runs to reach another node (its own keys and known_hosts; ``config`` is a path on nodes)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={NODE_SSH_TIMEOUT_S}"]
    if config:
        argv += ["-F", config]
    if port:
        argv += ["-p", str(port)]
    return argv


def node_ssh_probe(config: str | None, port: int | None, addr: str) -> list[str]:
    """``ssh OPTIONS -- ADDR true``: whether a node reaches another without a password."""
    return [*node_ssh_argv(config, port), "--", addr, "true"]


def node_ssh_problem(src: Runner, target: Node, config: str | None) -> str | None:
    """None when ``src``'s host can ssh to ``target`` over the data network without a password; else why not."""
    addr, port = data_address(target)
    # the inner ssh's status goes to stdout: its own 255 must not read as "src is unreachable"
    probe = ["sh", "-c", '"$@" </dev/null; echo "node-ssh-exit $?"', "sh", *node_ssh_probe(config, port, addr)]
    res = src.run(probe, timeout=NODE_SSH_TIMEOUT_S + 20)
    if res.ok and res.stdout.strip().endswith("node-ssh-exit 0"):
        return None
    tail = " ".join(res.stderr.strip().splitlines()[-2:])[-200:]
    return f"ssh from {src.host} to {addr} failed ({tail or res.stdout.strip()[-40:] or f'exit {res.returncode}'})"


def route(src_runner: Runner, dst_runner: Runner, dst_node: Node | None, config: str | None) -> str | None:
    """None when the source host can send straight to the target over the data network (node-to-node ssh works);
    else why the bytes go through this machine."""
    if isinstance(src_runner, LocalRunner):
        return "the source is this machine"
    if isinstance(dst_runner, LocalRunner) or dst_node is None:
        return "the target is this machine"
    return node_ssh_problem(src_runner, dst_node, config)


def landed(runner: Runner, path: str) -> int:
    """Bytes in the top-level files of path on the host (a transfer's temp and partial files included)."""
    listing = remote_listing(runner, path, hashes=False)
    return listing.total_bytes if listing else 0


def rsync_argv(files_from: str, src_dir: str, dest: str, *, ssh: Sequence[str] | None,
               bwlimit_mb: float | None) -> list[str]:
    """rsync of the listed files: resumable (``--partial --append-verify``), symlinks copied as files (a Hugging
    Face snapshot links into blobs/), stats at the end. ``--protect-args``: the remote path reaches the remote
    rsync as data, not through the remote shell (rsync < 3.2.4 word-splits it there by default: a ';' in a model
    path would run a command on the node)."""
    argv = ["rsync", "-a", "--protect-args", "--copy-links", "--partial", "--append-verify", "--stats",
            f"--files-from={files_from}"]
    if bwlimit_mb:
        argv.append(f"--bwlimit={max(1, int(bwlimit_mb * 1e6 / 1024))}")
    if ssh is not None:
        argv += ["-e", shlex.join(ssh)]
    return [*argv, f"{src_dir.rstrip('/')}/", f"{dest.rstrip('/')}/"]


def start_rsync(sender: Site, target: Site, files: Sequence[str], *, node_ssh_config: str | None,
                bwlimit_mb: float | None) -> jobs.Job:
    """rsync as a job on the sender's host: from this machine over the target's own ssh, or from a node to the
    target's data address."""
    folder = jobs.new_folder(sender.runner, "rsync")
    if target.here:
        ssh, dest = None, target.path
    elif sender.here:
        assert isinstance(target.runner, SshRunner)
        ssh, dest = target.runner.options(), f"{target.runner.target}:{target.path}"
    else:
        assert target.node is not None
        addr, port = data_address(target.node)
        ssh, dest = node_ssh_argv(node_ssh_config, port), f"{addr}:{target.path}"
    argv = rsync_argv(f"{folder}/files", sender.path, dest, ssh=ssh, bwlimit_mb=bwlimit_mb)
    return jobs.start(sender.runner, folder, jobs.with_exit_line(argv), files={"files": "\n".join(files) + "\n"})


def _pump(src: subprocess.Popen[bytes], dst: subprocess.Popen[bytes], on_bytes: Callable[[int], None],
          bwlimit_mb: float | None, cancel: threading.Event) -> int:
    assert src.stdout is not None and dst.stdin is not None
    moved, t0 = 0, time.monotonic()
    while not cancel.is_set():
        chunk = os.read(src.stdout.fileno(), CHUNK)
        if not chunk:
            break
        dst.stdin.write(chunk)
        moved += len(chunk)
        on_bytes(len(chunk))
        if bwlimit_mb:
            lag = moved / (bwlimit_mb * 1e6) - (time.monotonic() - t0)
            if lag > 0:
                time.sleep(lag)
    return moved


def pipe(src_runner: Runner, src_argv: Sequence[str], dst_runner: Runner, dst_argv: Sequence[str], *,
         on_bytes: Callable[[int], None], cancel: threading.Event, bwlimit_mb: float | None = None,
         what: str = "") -> int:
    """src_argv's stdout into dst_argv's stdin through this machine; the bytes moved. Raises TransferError
    naming the side that failed."""
    src = subprocess.Popen(stream_argv(src_runner, src_argv), stdout=subprocess.PIPE,  # noqa: S603 - argv lists
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    dst = subprocess.Popen(stream_argv(dst_runner, dst_argv), stdin=subprocess.PIPE,  # noqa: S603
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    moved, broken = 0, False
    try:
        moved = _pump(src, dst, on_bytes, bwlimit_mb, cancel)
    except BrokenPipeError:
        broken = True  # the writing side went away: its stderr says why
    except BaseException:
        _kill(src, dst)
        raise
    if cancel.is_set() or broken:
        src.kill()  # never drain the rest of a large stream into memory
    assert dst.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        dst.stdin.close()
    dst.stdin = None  # closed here: communicate() must not flush it again
    try:
        _, src_err = src.communicate(timeout=600)
        _, dst_err = dst.communicate(timeout=600)
    except subprocess.TimeoutExpired as exc:
        _kill(src, dst)
        raise TransferError(f"{dst_runner.host}: {what} did not finish within 600 s after the data",
                            host=dst_runner.host, fix="Check that both hosts answer over ssh.") from exc
    if cancel.is_set():
        raise TransferError(f"{dst_runner.host}: {what} interrupted", host=dst_runner.host)
    sides = [("reading on " + src_runner.host, src, src_err), ("writing on " + dst_runner.host, dst, dst_err)]
    for side, proc, err in (sides[::-1] if broken else sides):
        if proc.returncode != 0 or broken:
            tail = err.decode(errors="replace").strip()[-300:]
            raise TransferError(f"{dst_runner.host}: {what} failed {side} (exit {proc.returncode}): {tail}",
                                host=dst_runner.host, fix="Check disk space and that both hosts answer over ssh.")
    return moved


def _kill(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.communicate(timeout=30)
