"""``forklift image sync``: a container image onto every node that lacks it, by digest.

The digest is the image ID (``docker image inspect --format {{.Id}}``, the sha256 of the image's config). Both
``docker save | docker load`` and a registry push/pull keep it, so a node is up to date exactly when the ID its
daemon gives for the name equals the source's. The source: ``source=`` (a node's host or ``local``), else the
first node holding the image, else this machine. For every other node:
- holding the same ID: skipped, nothing is sent to it;
- otherwise ``docker save`` on the source streamed into ``docker load`` on the target: from node to node over
  the data network when the source can ssh to the target (bytes counted by ``dd`` on the way), else relayed
  through this machine (two ssh streams, no temp file here); or, with ``registry``, one push from the source and
  a pull on each target.
Afterwards each target's ID is compared with the source's.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from forklift.distribution import jobs
from forklift.distribution.sync import LOCAL, parallel
from forklift.distribution.transfer import (
    Progress,
    ProgressFn,
    Rate,
    data_address,
    no_progress,
    node_ssh_argv,
    pipe,
    route,
)
from forklift.errors import RunnerError, TransferError
from forklift.recipe.schema import Node, Recipe
from forklift.runner import LocalRunner, Runner, fan_out

_DD_BYTES = re.compile(r"(\d+) bytes")
SAVE_TO_SSH = 'img=$1; prog=$2; shift 2; docker save "$img" | dd bs=1M status=progress 2>"$prog" | "$@" docker load'


@dataclass
class NodeImage:
    host: str
    before: str | None
    """The ID the node had for the name (None: it had no such image)."""
    after: str | None = None
    method: str = "plan"
    """plan (dry run) | source | skip | node (save | ssh load between nodes) | relay | registry | failed."""
    bytes: int | None = None
    seconds: float | None = None
    note: str = ""
    error: str | None = None

    @property
    def mb_s(self) -> float | None:
        return self.bytes / self.seconds / 1e6 if self.bytes and self.seconds else None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "mb_s": None if self.mb_s is None else round(self.mb_s, 2)}


@dataclass
class ImageReport:
    image: str
    digest: str
    source: str
    nodes: list[NodeImage] = field(default_factory=list)

    def raise_if_failed(self) -> None:
        bad = [n for n in self.nodes if n.error]
        if bad:
            raise TransferError("image sync failed on " + "; ".join(f"{n.host}: {n.error}" for n in bad),
                                host=bad[0].host, fix="Check disk space and the docker daemon there, then run the "
                                "same sync again (nodes that already have the image are skipped).")

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image, "digest": self.digest, "source": self.source,
                "nodes": [n.to_json() for n in self.nodes]}


def image_id(runner: Runner, image: str) -> str | None:
    """The image ID the host's docker daemon has for image, or None (no such image, or no docker)."""
    try:
        res = runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], timeout=60)
    except RunnerError:
        return None
    value = res.stdout.strip()
    return value if res.ok and value.startswith("sha256:") else None


def image_size(runner: Runner, image: str) -> int:
    res = runner.run(["docker", "image", "inspect", "--format", "{{.Size}}", image], timeout=60)
    return int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 0


def registry_ref(registry: str, image: str) -> str:
    """The name the image gets in ``registry``: its repository path (any registry host dropped) and tag."""
    first, _, rest = image.partition("/")
    path = rest if rest and ("." in first or ":" in first or first == "localhost") else image
    return f"{registry.rstrip('/')}/{path}"


@dataclass(frozen=True)
class Holder:
    host: str
    runner: Runner
    node: Node | None


def _node_to_node(src: Holder, dst: Holder, image: str, total: int, node_ssh_config: str | None,
                  on_progress: ProgressFn, cancel: threading.Event) -> tuple[int, float | None]:
    """docker save | dd | ssh TARGET docker load as a job on the source; (bytes, seconds on the source's clock)."""
    assert dst.node is not None
    addr, port = data_address(dst.node)
    folder = jobs.new_folder(src.runner, "image")
    argv = ["sh", "-c", SAVE_TO_SSH, "sh", image, f"{folder}/dd", *node_ssh_argv(node_ssh_config, port), "--", addr]
    job = jobs.start(src.runner, folder, jobs.with_exit_line(argv))
    rate, moved = Rate(), 0
    try:
        while job.exit_code is None:
            if cancel.is_set():
                jobs.stop(job)
                raise TransferError(f"{dst.host}: image copy interrupted", host=dst.host)
            time.sleep(1.0)
            jobs.read(job)
            counts = _DD_BYTES.findall(src.runner.run(["cat", f"{folder}/dd"], timeout=30).stdout)
            moved = int(counts[-1]) if counts else moved
            on_progress(Progress(dst.host, "image", moved, max(total, moved), rate.update(moved)))
            if job.exit_code is None and not jobs.running(job):
                jobs.read(job)
                break
        if job.exit_code != 0:
            tail = " | ".join(job.text[-3:])[-300:]
            raise TransferError(f"{dst.host}: docker save | ssh {addr} docker load from {src.host} exited "
                                f"{job.exit_code}: {tail}", host=dst.host)
    except BaseException:
        jobs.stop_quietly(job)
        raise
    finally:
        jobs.remove(job)
    return moved, job.duration


def _relay(src: Holder, dst: Holder, image: str, total: int, on_progress: ProgressFn,
           cancel: threading.Event) -> int:
    state = {"done": 0, "shown": 0.0}
    rate = Rate()

    def counted(n: int) -> None:
        state["done"] += n
        if time.monotonic() - state["shown"] >= 0.5:
            state["shown"] = time.monotonic()
            done = int(state["done"])
            on_progress(Progress(dst.host, "image", done, max(total, done), rate.update(done)))

    return pipe(src.runner, ["docker", "save", image], dst.runner, ["docker", "load"], on_bytes=counted,
                cancel=cancel, what=f"docker save {image} | docker load")


def _registry_pull(dst: Holder, image: str, ref: str) -> None:
    for argv in (["docker", "pull", ref], ["docker", "tag", ref, image], ["docker", "image", "rm", ref]):
        res = dst.runner.run(argv, timeout=24 * 3600)
        if not res.ok:
            raise TransferError(f"{dst.host}: `{' '.join(argv)}` failed: {res.stderr.strip()[-300:]}", host=dst.host,
                                fix="Check that the node reaches the registry (and trusts it: insecure-registries "
                                "for plain HTTP).")


def _holders(recipe: Recipe, runners: Mapping[int, Runner]) -> list[Holder]:
    out = [Holder(recipe.nodes[i].host, runners[i], recipe.nodes[i]) for i in sorted(runners)]
    if not any(isinstance(h.runner, LocalRunner) for h in out):
        out.append(Holder(LOCAL, LocalRunner(), None))
    return out


@dataclass(frozen=True)
class ImageOptions:
    source: str | None = None
    registry: str | None = None
    node_ssh_config: str | None = None
    on_progress: ProgressFn = no_progress
    max_parallel: int = 4


def _pick(holders: list[Holder], ids: dict[str, str | None], image: str, wanted: str | None) -> Holder:
    for h in holders:
        if ids[h.host] and (wanted is None or h.host == wanted):
            return h
    where = wanted or "any node or this machine"
    raise TransferError(f"{where} has no image {image}", host=wanted,
                        fix=f"Build or pull {image} on one node first (or here), or name a node that has it with "
                        "--from.")


def _one(src: Holder, dst: Holder, image: str, digest: str, total: int, opts: ImageOptions,
         cancel: threading.Event) -> NodeImage:
    item = NodeImage(dst.host, None)
    item.before = image_id(dst.runner, image)
    if item.before == digest:
        item.method, item.note = "skip", "already has this digest"
        return item
    if opts.registry:
        item.method, t0 = "registry", time.monotonic()
        _registry_pull(dst, image, registry_ref(opts.registry, image))
        item.seconds = round(time.monotonic() - t0, 3)
    else:
        problem = route(src.runner, dst.runner, dst.node, opts.node_ssh_config)
        item.method = "node" if problem is None else "relay"
        item.note = "" if problem is None else f"{problem}: relayed through this machine"
        t0 = time.monotonic()
        if problem is None:
            item.bytes, took = _node_to_node(src, dst, image, total, opts.node_ssh_config, opts.on_progress, cancel)
        else:
            item.bytes, took = _relay(src, dst, image, total, opts.on_progress, cancel), None
        item.seconds = round(took if took is not None else time.monotonic() - t0, 3)
    item.after = image_id(dst.runner, image)
    if item.after != digest:
        raise TransferError(f"{dst.host}: after loading, {image} is {item.after or 'missing'}, not {digest}",
                            host=dst.host, fix="Run the sync again; check the node's disk space.")
    return item


def sync_image(image: str, recipe: Recipe, runners: Mapping[int, Runner], *, options: ImageOptions | None = None,
               dry_run: bool = False) -> ImageReport:
    """Bring every node of the recipe to the source's image ID for ``image``; one NodeImage per node."""
    opts = options or ImageOptions()
    holders = _holders(recipe, runners)
    nodes = [h for h in holders if h.node is not None]
    found = fan_out(((h.host, h) for h in nodes), lambda h: image_id(h.runner, image))
    ids = {h.host: found.results.get(h.host) for h in nodes}
    if len(holders) > len(nodes) and (opts.source == LOCAL or (opts.source is None and not any(ids.values()))):
        ids[LOCAL] = image_id(holders[-1].runner, image)  # this machine, only when no node has it
    holders = [h for h in holders if h.host in ids]
    src = _pick(holders, ids, image, opts.source)
    digest = ids[src.host]
    assert digest is not None
    report = ImageReport(image, digest, src.host)
    targets = {h.host: h for h in holders if h.node is not None and h is not src}
    if src.node is not None:
        report.nodes.append(NodeImage(src.host, digest, digest, method="source"))
    if dry_run:
        report.nodes += [NodeImage(h.host, ids[h.host], method="skip" if ids[h.host] == digest else "plan")
                         for h in targets.values()]
        return _ordered(report, recipe)
    if opts.registry and any(ids[h] != digest for h in targets):
        ref = registry_ref(opts.registry, image)
        for argv in (["docker", "tag", image, ref], ["docker", "push", ref]):
            res = src.runner.run(argv, timeout=24 * 3600)
            if not res.ok:
                raise TransferError(f"{src.host}: `{' '.join(argv)}` failed: {res.stderr.strip()[-300:]}",
                                    host=src.host, fix="Check the registry address and that the source reaches it.")
    total = image_size(src.runner, image)
    cancel = threading.Event()
    results, errors = parallel(targets, lambda h: _one(src, h, image, digest, total, opts, cancel), cancel,
                               opts.max_parallel)
    for host in targets:
        report.nodes.append(results.get(host) or NodeImage(host, ids[host], method="failed", error=str(errors[host])))
    return _ordered(report, recipe)


def _ordered(report: ImageReport, recipe: Recipe) -> ImageReport:
    order = {n.host: i for i, n in enumerate(recipe.nodes)}
    report.nodes.sort(key=lambda n: order.get(n.host, len(order)))
    return report
