"""One target's copy: compare what it has with the source, remove what is wrong, send the rest, check again.

"Matching" is the same size and, for config.json and the safetensors index, the same sha256; with ``verify``
every needed file's sha256 is compared with the source's (a file corrupted without changing its size is only
found that way). A partial file (shorter than the source's) is kept and continued, a longer or wrong one removed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from forklift.distribution import jobs
from forklift.distribution.modelfiles import HASHED, Listing, remote_listing
from forklift.distribution.transfer import (
    Progress,
    ProgressFn,
    Rate,
    Site,
    landed,
    no_progress,
    pipe,
    route,
    start_rsync,
)
from forklift.errors import TransferError
from forklift.runner import Runner

SumsFn = Callable[[Sequence[str]], dict[str, str]]
"""sha256 of the source's files, by name (computed once per source, shared by every target)."""
POLL_S = 1.0


@dataclass(frozen=True)
class CopyOptions:
    verify: bool = False
    """Compare every needed file's sha256 with the source's (before and after copying)."""
    bwlimit_mb: float | None = None
    """Per target, MB/s (rsync --bwlimit, or the relay's own pacing)."""
    node_ssh_config: str | None = None
    """An ssh_config path on the nodes, for node-to-node copies (their own ~/.ssh/config otherwise)."""
    on_progress: ProgressFn = no_progress
    max_parallel: int = 4


@dataclass
class NodeSync:
    """What one node needed, what it got and how fast."""

    host: str
    dest: str
    files: list[str]
    bytes: int
    """Bytes of the files this node needs."""
    source: str | None = None
    method: str = "plan"
    """plan (dry run) | source (it is the copy) | skip (already matching) | rsync | rsync-node | relay."""
    transferred: int | None = None
    """Bytes that landed on the node (a resumed file counts only its rest)."""
    seconds: float | None = None
    """How long the bytes took: rsync's own run (timed on the sending host) or the relay's streams."""
    sent: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    """Files that were there but wrong (size or sha256) and were sent again."""
    note: str = ""
    error: str | None = None

    @property
    def mb_s(self) -> float | None:
        if not self.transferred or not self.seconds:
            return None
        return self.transferred / self.seconds / 1e6

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "mb_s": None if self.mb_s is None else round(self.mb_s, 2)}


def sha256_of(runner: Runner, folder: str, names: Sequence[str], *, timeout: float = 24 * 3600) -> dict[str, str]:
    """sha256 of folder/name for each name present on the host (symlinks followed)."""
    if not names:
        return {}
    res = runner.run(["sha256sum", "--", *(f"{folder}/{n}" for n in names)], timeout=timeout)
    out: dict[str, str] = {}
    prefix = folder.rstrip("/") + "/"
    for line in res.stdout.splitlines():
        digest, _, path = line.partition("  ")
        if path.startswith(prefix):
            out[path[len(prefix):]] = digest
    return out


@dataclass(frozen=True)
class Diff:
    missing: list[str]
    partial: list[str]
    wrong: list[str]

    @property
    def to_send(self) -> list[str]:
        return sorted({*self.missing, *self.partial, *self.wrong})


def compare(files: Sequence[str], have: Listing | None, ref: Listing, sums: Mapping[str, str] | None = None,
            target_sums: Mapping[str, str] | None = None) -> Diff:
    """What a target lacks, holds partly (shorter) or holds wrongly, against the source's listing (and sha256)."""
    sizes = have.sizes if have else {}
    missing = [f for f in files if f not in sizes]
    partial = [f for f in files if f in sizes and sizes[f] < ref.sizes[f]]
    wrong = [f for f in files if f in sizes and sizes[f] > ref.sizes[f]]
    for f in files:
        if f not in sizes or sizes[f] != ref.sizes[f]:
            continue
        hash_differs = f in HASHED and have is not None and f in ref.hashes and have.hashes.get(f) != ref.hashes[f]
        sum_differs = sums is not None and target_sums is not None and target_sums.get(f) != sums.get(f)
        if hash_differs or sum_differs:
            wrong.append(f)
    return Diff(missing, partial, sorted(set(wrong)))


def _wait_rsync(job: jobs.Job, target: Site, base: int, total: int, opts: CopyOptions,
                cancel: threading.Event) -> None:
    rate, t0 = Rate(), time.monotonic()
    while True:
        jobs.read(job)
        if job.exit_code is not None:
            break
        if cancel.is_set():
            jobs.stop(job)
            raise TransferError(f"{target.host}: copy interrupted", host=target.host)
        if not jobs.running(job):
            jobs.read(job)
            if job.exit_code is None:
                raise TransferError(f"{target.host}: rsync on {job.runner.host} ended without a status: "
                                    + " ".join(job.text[-3:])[-300:], host=target.host)
            break
        done = min(total, max(0, landed(target.runner, target.path) - base))
        opts.on_progress(Progress(target.host, "sync", done, total, rate.update(done)))
        time.sleep(0.2 if time.monotonic() - t0 < 2 else POLL_S)  # short copies are timed closely too
    if job.exit_code != 0:
        tail = " | ".join(line.strip() for line in job.text[-4:] if line.strip())[-400:]
        raise TransferError(f"{target.host}: rsync from {job.runner.host} exited {job.exit_code}: {tail}",
                            host=target.host, fix=f"Check disk space and that rsync is installed on {target.host}; "
                            "run the sync again to continue where it stopped.")


def _relay(source: Site, target: Site, names: Sequence[str], ref: Listing, have: Listing | None,
           opts: CopyOptions, cancel: threading.Event) -> None:
    sizes = have.sizes if have else {}
    total = sum(ref.sizes[f] - sizes.get(f, 0) for f in names)
    state = {"done": 0, "shown": 0.0}
    rate = Rate()

    def counted(n: int) -> None:
        state["done"] += n
        now = time.monotonic()
        if now - state["shown"] >= 0.5:
            state["shown"] = now
            opts.on_progress(Progress(target.host, "sync", int(state["done"]), total, rate.update(int(state["done"]))))

    for name in names:
        offset = sizes.get(name, 0)
        write = 'mkdir -p "$(dirname "$1")" && cat ' + (">>" if offset else ">") + ' "$1"'
        pipe(source.runner, ["tail", "-c", f"+{offset + 1}", f"{source.path}/{name}"],
             target.runner, ["sh", "-c", write, "sh", f"{target.path}/{name}"],
             on_bytes=counted, cancel=cancel, bwlimit_mb=opts.bwlimit_mb, what=f"relaying {name}")


def choose_method(source: Site, target: Site, opts: CopyOptions) -> tuple[str, str]:
    """(method, why) for a copy from source to target."""
    if source.here:
        return "rsync", ""
    problem = route(source.runner, target.runner, target.node, opts.node_ssh_config)
    if problem is None:
        return "rsync-node", ""
    return "relay", f"{problem}: relayed through this machine"


def _send(method: str, source: Site, target: Site, names: list[str], ref: Listing, have: Listing | None,
          opts: CopyOptions, cancel: threading.Event) -> float:
    """Send names; the seconds the bytes took (rsync's own run on the sender's clock, or the relay's streams)."""
    target.runner.run(["mkdir", "-p", target.path], timeout=60).check()
    if method == "relay":
        t0 = time.monotonic()
        _relay(source, target, names, ref, have, opts, cancel)
        return time.monotonic() - t0
    base = landed(target.runner, target.path)
    t0 = time.monotonic()
    job = start_rsync(source, target, names, node_ssh_config=opts.node_ssh_config, bwlimit_mb=opts.bwlimit_mb)
    try:
        _wait_rsync(job, target, base, sum(ref.sizes[f] for f in names), opts, cancel)
    except BaseException:
        jobs.stop_quietly(job)
        raise
    finally:
        jobs.remove(job)
    return job.duration if job.duration is not None else time.monotonic() - t0


def _check(target: Site, files: Sequence[str], ref: Listing, sums: SumsFn | None, sent: Sequence[str],
           resumed: Sequence[str], source: Site) -> list[str]:
    """Files that still do not match after a copy (sha256 compared for what was sent with ``verify``, and for
    files the relay continued)."""
    have = remote_listing(target.runner, target.path)
    bad = compare(files, have, ref).to_send
    hashed = sorted({*resumed, *(sent if sums is not None else ())} - set(bad))
    if hashed:
        want = sums(hashed) if sums is not None else sha256_of(source.runner, source.path, hashed)
        got = sha256_of(target.runner, target.path, hashed)
        bad += [f for f in hashed if got.get(f) != want.get(f)]
    return sorted(set(bad))


def copy_to(source: Site, target: Site, files: list[str], ref: Listing, opts: CopyOptions,
            cancel: threading.Event, *, sums: SumsFn | None = None, dry_run: bool = False) -> NodeSync:
    """Bring target to hold ``files`` exactly as the source has them (``sums`` given: sha256 compared)."""
    item = NodeSync(target.host, target.path, list(files), sum(ref.sizes[f] for f in files), source=source.host)
    have = remote_listing(target.runner, target.path)
    target_sums = sha256_of(target.runner, target.path, [f for f in files if have and f in have.sizes]) \
        if sums is not None and have else None
    diff = compare(files, have, ref, sums(files) if sums is not None else None, target_sums)
    if not diff.to_send:
        item.method, item.note = "skip", "already holds matching files"
        return item
    item.method, why = choose_method(source, target, opts)
    item.note, item.sent, item.repaired = why, diff.to_send, diff.wrong
    if dry_run:
        return item
    if diff.wrong:
        target.runner.run(["rm", "-f", "--", *(f"{target.path}/{f}" for f in diff.wrong)], timeout=120).check()
        have = remote_listing(target.runner, target.path)
    before, seconds = landed(target.runner, target.path), 0.0
    for attempt in range(2):
        seconds += _send(item.method, source, target, item.sent, ref, have, opts, cancel)
        bad = _check(target, files, ref, sums, item.sent, diff.partial if item.method == "relay" else [], source)
        if not bad:
            break
        if attempt == 1:
            raise TransferError(f"{target.host}: {', '.join(bad[:5])} still differ from {source.host} after copying "
                                "twice", host=target.host, fix="Check the disks of both nodes; run with --verify.")
        target.runner.run(["rm", "-f", "--", *(f"{target.path}/{f}" for f in bad)], timeout=120).check()
        item.repaired = sorted({*item.repaired, *bad})
        item.sent, have = bad, remote_listing(target.runner, target.path)
    item.seconds = round(seconds, 3)
    item.transferred = max(0, landed(target.runner, target.path) - before)
    opts.on_progress(Progress(target.host, "sync", item.transferred, item.transferred,
                              item.transferred / item.seconds if item.seconds else 0.0))
    return item
