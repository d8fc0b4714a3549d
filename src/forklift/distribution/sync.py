"""``forklift model sync``: every node gets the model files it needs, from whichever copy has them.

1. Locate each node's copy (its ``model_path`` / ``model.path`` / the hub id's snapshot in that node's Hugging
   Face cache) and what is there (sizes; sha256 of config.json and the index); this machine's copy too.
2. The source: ``source=`` (a node's host, or ``local``), else the fullest copy, nodes before this machine
   (the data network between nodes is the fast one).
3. Per target, the files its pipeline stage needs (``model.files``: its shards plus shared files), compared with
   the source (``distribution.copy``); a node already holding matching files is skipped.
4. Copy in parallel, resumable, over the data network when nodes can ssh to each other, else relayed through
   this machine (``distribution.transfer``); bytes, seconds and MB/s per node. Then check what landed.
"""

from __future__ import annotations

import concurrent.futures as cf
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from forklift.distribution import jobs
from forklift.distribution.copy import CopyOptions, NodeSync, copy_to, sha256_of
from forklift.distribution.modelfiles import (
    INDEX,
    Listing,
    cache_repo_dir,
    hub_cache,
    index_map,
    local_listing,
    needed_files,
    read_json,
    remote_listing,
    selection,
    snapshot_dir,
)
from forklift.distribution.transfer import Site
from forklift.errors import TransferError
from forklift.host import remote
from forklift.launch.render import model_paths
from forklift.recipe.schema import Recipe
from forklift.runner import LocalRunner, Runner
from forklift.runner.fanout import fan_out

__all__ = ["CopyOptions", "NodeSync", "SyncReport", "locate", "parallel", "plan_sync", "sync"]

LOCAL = "local"
_SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{40})/?$")
K = TypeVar("K")
R = TypeVar("R")


@dataclass
class Located:
    """Where node ``index`` keeps the model (path None: a hub id whose snapshot that node's cache lacks)."""

    index: int | None
    site: Site | None
    listing: Listing | None
    hub_cache: str | None = None
    """For a hub id read from the Hugging Face cache: that node's hub cache folder."""


@dataclass
class SyncReport:
    source: str
    source_path: str
    nodes: list[NodeSync] = field(default_factory=list)

    @property
    def failed(self) -> list[NodeSync]:
        return [n for n in self.nodes if n.error]

    def raise_if_failed(self) -> None:
        if self.failed:
            raise TransferError("model sync failed on " + "; ".join(f"{n.host}: {n.error}" for n in self.failed),
                                host=self.failed[0].host, fix="Run the same sync again: what arrived is kept and "
                                "partial files continue.")

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "source_path": self.source_path, "nodes": [n.to_json() for n in self.nodes]}


def node_hub_cache(recipe: Recipe, index: int, runner: Runner, home: str) -> str:
    return hub_cache(runner, {**recipe.env, **recipe.nodes[index].env}, home)


def _locate_node(recipe: Recipe, index: int, runner: Runner) -> Located:
    home = jobs.home_of(runner)
    path, _ = model_paths(recipe, index, home)
    cache = None
    if path is None:
        cache = node_hub_cache(recipe, index, runner, home)
        path = snapshot_dir(runner, recipe.model.source, recipe.model.revision, cache)
    node = recipe.nodes[index]
    site = Site(node.host, runner, path, node) if path else None
    return Located(index, site, remote_listing(runner, path) if path else None, cache)


def locate(recipe: Recipe, runners: Mapping[int, Runner], here: Path | None = None) -> list[Located]:
    """Every node's copy (in node order), then this machine's (``here``) when it is not one of them."""
    done = fan_out(((i, i) for i in runners), lambda i: _locate_node(recipe, i, runners[i]))
    done.raise_first()
    out = [done.results[i] for i in sorted(done.results)]
    if here is not None and not any(loc.site and loc.site.here and Path(loc.site.path).resolve() == here.resolve()
                                    for loc in out):
        out.append(Located(None, Site(LOCAL, LocalRunner(), str(here)), local_listing(here)))
    return out


def pick_source(located: list[Located], wanted: str | None) -> Located:
    """``wanted`` (a node host or 'local'), else the copy with the most bytes (nodes first on a tie)."""
    holders = [loc for loc in located if loc.site and loc.listing and "config.json" in loc.listing.sizes]
    if wanted:
        for loc in holders:
            assert loc.site is not None
            if loc.site.host == wanted:
                return loc
        raise TransferError(f"{wanted} holds no copy of the model (no config.json where the recipe says)",
                            host=wanted, fix="Name a node that has the files with --from, or pull the model first.")
    if not holders:
        raise TransferError("no node (and not this machine) holds the model", fix="Download it first: "
                            "`forklift model pull ORG/NAME --recipe RECIPE`.")
    best = max(holders, key=lambda loc: (loc.listing.total_bytes if loc.listing else 0, loc.index is not None))
    return best


def _need(recipe: Recipe, source: Located) -> dict[int, list[str]]:
    assert source.site is not None and source.listing is not None
    index = read_json(source.site.runner, f"{source.site.path}/{INDEX}")
    config = read_json(source.site.runner, f"{source.site.path}/config.json") or {}
    return selection(recipe, source.listing.sizes, config, index_map(index))


def _target_site(recipe: Recipe, loc: Located, source: Located, runner: Runner) -> Site:
    if loc.site is not None:
        return loc.site
    assert source.site is not None and loc.hub_cache is not None and loc.index is not None
    m = _SNAPSHOT_RE.search(source.site.path)
    if m is None:
        raise TransferError(f"{recipe.nodes[loc.index].host}: cannot tell which commit of {recipe.model.source} to "
                            f"place in its Hugging Face cache (the source {source.site.path} is not a snapshot)",
                            host=recipe.nodes[loc.index].host, fix="Set model.path, or use `forklift model pull`.")
    path = f"{cache_repo_dir(loc.hub_cache, recipe.model.source)}/snapshots/{m.group(1)}"
    node = recipe.nodes[loc.index]
    return Site(node.host, runner, path, node)


def finish_target(recipe: Recipe, source: Site, target: Site) -> None:
    """After a copy: the cache ref (``refs/<revision>``) for a snapshot, the pull's pin file for a directory."""
    m = _SNAPSHOT_RE.search(target.path)
    if m is not None:
        ref = f"{target.path.split('/snapshots/')[0]}/refs/{recipe.model.revision or 'main'}"
        if not re.fullmatch(r"[0-9a-f]{40}", recipe.model.revision or ""):
            target.runner.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1"', "sh", ref,
                               m.group(1)], timeout=60).check()
        return
    pin = source.runner.run(["cat", f"{source.path}/.forklift/source.json"], timeout=60)
    if pin.ok:
        remote.write_text(target.runner, f"{target.path}/.forklift/source.json", pin.stdout)


def parallel(items: Mapping[K, Any], fn: Callable[[Any], R], cancel: threading.Event,
             max_workers: int) -> tuple[dict[K, R], dict[K, Exception]]:
    """fn per item on a few threads; Ctrl-C sets ``cancel`` (the workers stop their transfers) and re-raises."""
    results: dict[K, R] = {}
    errors: dict[K, Exception] = {}
    pool = cf.ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items) or 1)))
    futures = {pool.submit(fn, item): key for key, item in items.items()}
    try:
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=0.5)
            for fut in done:
                exc = fut.exception()
                if exc is None:
                    results[futures[fut]] = fut.result()
                elif isinstance(exc, Exception):
                    errors[futures[fut]] = exc
    except KeyboardInterrupt:
        cancel.set()
        pool.shutdown(wait=True)
        raise
    pool.shutdown(wait=True)
    return results, errors


def _summer(site: Site) -> Callable[[Sequence[str]], dict[str, str]]:
    cache: dict[str, str] = {}
    lock = threading.Lock()

    def sums(names: Sequence[str]) -> dict[str, str]:
        with lock:
            todo = [n for n in names if n not in cache]
            cache.update(sha256_of(site.runner, site.path, todo))
            return {n: cache[n] for n in names if n in cache}

    return sums


def sync(recipe: Recipe, runners: Mapping[int, Runner], *, here: Path | None = None, source: str | None = None,
         options: CopyOptions | None = None, dry_run: bool = False) -> SyncReport:
    """Copy what each node needs from the source copy; one NodeSync per node (errors kept per node)."""
    opts = options or CopyOptions()
    located = locate(recipe, runners, here)
    src = pick_source(located, source)
    assert src.site is not None and src.listing is not None
    site, ref = src.site, src.listing
    need = _need(recipe, src)
    report = SyncReport(site.host, site.path)
    sums = _summer(site) if opts.verify else None
    cancel = threading.Event()

    def one(loc: Located) -> NodeSync:
        assert loc.index is not None
        files = need[loc.index]
        if loc is src:
            return NodeSync(site.host, site.path, files, sum(ref.sizes[f] for f in files), source=site.host,
                            method="source", note="source itself")
        target = _target_site(recipe, loc, src, runners[loc.index])
        lacking = [f for f in files if f not in ref.sizes]
        if lacking:
            raise TransferError(f"{target.host}: the source {site.host} lacks {', '.join(lacking[:4])}",
                                host=target.host, fix="Pull the model (`forklift model pull`) or name a fuller "
                                "copy with --from.")
        item = copy_to(site, target, files, ref, opts, cancel, sums=sums, dry_run=dry_run)
        if not dry_run and item.method not in ("skip", "source"):
            finish_target(recipe, site, target)
        return item

    nodes = {loc.index: loc for loc in located if loc.index is not None}
    results, errors = parallel(nodes, one, cancel, opts.max_parallel)
    for i in sorted(nodes):
        if i in results:
            report.nodes.append(results[i])
        else:
            host, where = recipe.nodes[i].host, nodes[i].site
            report.nodes.append(NodeSync(host, where.path if where else "", need[i], 0,
                                         source=site.host, method="failed", error=str(errors[i])))
    return report


def plan_sync(recipe: Recipe, model_dir: Path) -> list[NodeSync]:
    """Which files (and how many bytes) every node needs, from a copy on this machine (no node is asked)."""
    listing = local_listing(model_dir)
    need = needed_files(model_dir, recipe, listing)
    return [NodeSync(node.host, node.model_path or str(model_dir), need[i], sum(listing.sizes[f] for f in need[i]))
            for i, node in enumerate(recipe.nodes)]
