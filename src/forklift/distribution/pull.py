"""``forklift model pull``: a Hub model onto every node, pinned to one commit, verified against the Hub's hashes.

Where it is downloaded (``via`` forces the second way):
- **each node pulls its own files** when the nodes need mostly different files (pipeline parallelism: each
  stage's shards plus the small shared ones): every byte crosses the internet link once, the nodes download in
  parallel, nothing is copied twice and no node needs ssh to another;
- **one node pulls, then fans out** (the head, or ``via``) when the nodes need the same files (tensor parallel
  or replicas across nodes): pulling on every node would bring the whole model over the internet link once per
  node, while the data network between nodes (200GbE on DGX Spark) is far faster than any internet link.
The rule: each node pulls its own when the bytes the nodes need add up to at most ``EACH_NODE_RATIO`` times the
bytes of the files needed at all.

Every node then runs the same small program (``forklift.engine.hub_fetch``, run by the node's own Python over
its Runner): it downloads what is missing, resumes a partial file, and verifies size and sha256 against the
Hub's listing; after a fan-out it finds the copied files present and verifies them the same way.

Which files: what vLLM 0.32 downloads for a safetensors checkpoint (the shards its index names; vllm
``model_executor/model_loader/weight_utils.py:download_weights_from_hf``) plus every non-weight file
(config, tokenizer, chat template); other weight formats (``*.bin``, ``*.pth``, ``original/``...) are skipped.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forklift.distribution import jobs
from forklift.distribution.copy import CopyOptions, NodeSync, copy_to
from forklift.distribution.modelfiles import INDEX, Listing, cache_repo_dir, index_map, selection
from forklift.distribution.pullwatch import NodePull, PullJob, watch
from forklift.distribution.sync import SyncReport, node_hub_cache, parallel
from forklift.distribution.transfer import ProgressFn, Site, no_progress
from forklift.errors import HubError, TransferError
from forklift.launch.hosts import runners_for
from forklift.launch.render import model_paths
from forklift.model import hub
from forklift.model.hub import HubSnapshot
from forklift.recipe.schema import ModelSection, Node, Recipe, VenvRuntime
from forklift.runner import Runner, fan_out
from forklift.runner.ssh import default_ssh_config

EACH_NODE_RATIO = 1.25
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.h5", "*.msgpack", "*.onnx", "*.ot",
                   "*.tflite", "*.ckpt", "*.npz")
SKIPPED_ALWAYS = (".gitattributes",)
FORWARDED_ENV = ("HF_ENDPOINT", "HF_HUB_DISABLE_XET", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT",
                 "HF_XET_HIGH_PERFORMANCE", "HF_XET_CACHE")
PROGRAM = Path(__file__).resolve().parent.parent / "engine" / "hub_fetch.py"


@dataclass
class PullReport:
    repo: str
    revision: str
    commit: str
    mode: str
    """'each' (every node pulled its own files) or 'via' (one node pulled, then fanned out)."""
    via: str | None
    nodes: list[NodePull] = field(default_factory=list)
    fanout: SyncReport | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[NodePull]:
        return [n for n in self.nodes if n.error]

    def raise_if_failed(self) -> None:
        if self.failed:
            raise TransferError("model pull failed on " + "; ".join(f"{n.host}: {n.error}" for n in self.failed),
                                host=self.failed[0].host, fix="Run the same pull again: verified files are kept "
                                "and a partial file continues where it stopped.")

    def to_json(self) -> dict[str, Any]:
        return {"repo": self.repo, "revision": self.revision, "commit": self.commit, "mode": self.mode,
                "via": self.via, "nodes": [n.to_json() for n in self.nodes],
                "fanout": self.fanout.to_json() if self.fanout else None, "notes": self.notes}


def wanted_files(snap: HubSnapshot, index: dict[str, Any] | None) -> list[str]:
    """The files a node could need: every non-weight file, and the weights vLLM would load (the shards the index
    names; without an index, the top-level safetensors, or the top-level weights of another format)."""
    wmap = index_map(index)
    shards = set(wmap.values()) if wmap else None
    has_safetensors = any(f.name.endswith(".safetensors") for f in snap.files)
    out = []
    for f in snap.files:
        base = f.name.rsplit("/", 1)[-1]
        if base in SKIPPED_ALWAYS:
            continue
        if any(fnmatch.fnmatch(base, p) for p in WEIGHT_PATTERNS):
            if shards is not None:
                keep = f.name in shards
            else:
                keep = "/" not in f.name and (base.endswith(".safetensors") or not has_safetensors)
            if not keep:
                continue
        out.append(f.name)
    return out


def choose_mode(need: dict[int, list[str]], sizes: dict[str, int], via: int | None) -> tuple[str, int | None]:
    """('each', None) or ('via', node index): see the module's rule."""
    if via is not None:
        return "via", via
    union = {f for names in need.values() for f in names}
    everyone = sum(sizes[f] for names in need.values() for f in names)
    if len(need) <= 1 or everyone <= EACH_NODE_RATIO * sum(sizes[f] for f in union):
        return "each", None
    return "via", 0


def pull_recipe(ref: str, recipe: Recipe | None) -> tuple[Recipe, str, str | None]:
    """(the recipe to pull for, repo, revision): a one-node recipe for this machine when none is given."""
    repo, rev = hub.parse_ref(ref)
    if recipe is None:
        return Recipe(model=ModelSection(source=repo, revision=rev), nodes=[Node()]), repo, rev
    if recipe.model.is_bundled:
        raise HubError(f"recipe {recipe.name} serves a bundled model", fix="Pull with a recipe whose model.source "
                       "is the Hub id (or a path, with model.path where the files go).")
    if recipe.model.is_hub_id and recipe.model.source != repo:
        raise HubError(f"recipe {recipe.name} serves {recipe.model.source}, not {repo}",
                       fix=f"Pull {recipe.model.source}, or --set model.source={repo}.")
    return recipe, repo, rev or recipe.model.revision


def node_dest(recipe: Recipe, index: int, runner: Runner) -> tuple[str, str]:
    """(layout, path) where node index keeps the model: its directory, or its Hugging Face hub cache."""
    home = jobs.home_of(runner)
    path, _ = model_paths(recipe, index, home)
    if path is not None:
        return "dir", path
    return "cache", node_hub_cache(recipe, index, runner, home)


def model_dir(layout: str, dest: str, repo: str, commit: str) -> str:
    """The directory holding the files (a snapshot folder for the cache layout)."""
    if layout == "dir":
        return dest
    return f"{cache_repo_dir(dest, repo)}/snapshots/{commit}"


def node_python(recipe: Recipe, index: int, python: str | None) -> str:
    if python:
        return python
    if isinstance(recipe.runtime, VenvRuntime):
        return recipe.runtime.python or (sys.executable if recipe.nodes[index].is_local else "python3")
    return "python3"  # docker runtime: the node's own Python, outside the image


def check_python(runner: Runner, python: str) -> None:
    res = runner.run([python, "-c", "import huggingface_hub, sys; sys.stdout.write(huggingface_hub.__version__)"],
                     timeout=120)
    if not res.ok:
        raise HubError(f"{runner.host}: {python} cannot import huggingface_hub",
                       fix=f"pip install huggingface_hub into {python} on {runner.host}, pass --python with one "
                       "that has it, or pull on another node with --via.")


def _env(recipe: Recipe, index: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in FORWARDED_ENV}
    for source in (recipe.env, recipe.nodes[index].env):
        env.update({k: v for k, v in source.items() if k.startswith("HF_") or k.lower().endswith("_proxy")})
    env.pop("HF_TOKEN", None)  # the token travels as a secret only
    return env


def start_pull(recipe: Recipe, index: int, runner: Runner, snap: HubSnapshot, files: list[str], layout: str,
               dest: str, *, python: str, workers: int, token: str | None) -> PullJob:
    by_name = snap.by_name()
    spec = {"repo": snap.repo, "commit": snap.commit, "revision": snap.revision, "endpoint": hub.endpoint(),
            "dest": {"kind": layout, "path": dest}, "workers": workers,
            "files": [by_name[f].spec() for f in files]}
    folder = jobs.new_folder(runner, "pull")
    job = jobs.start(runner, folder, [python, f"{folder}/hub_fetch.py", f"{folder}/spec.json"],
                     files={"hub_fetch.py": PROGRAM.read_text(), "spec.json": json.dumps(spec, indent=1)},
                     env=_env(recipe, index), secret_env={"HF_TOKEN": token} if token else None)
    item = NodePull(recipe.nodes[index].host, dest, layout, files, sum(snap.sizes[f] for f in files))
    return PullJob(index, job, item)


def _fan_out(recipe: Recipe, runners: dict[int, Runner], snap: HubSnapshot, via: int, need: dict[int, list[str]],
             dests: dict[int, tuple[str, str]], options: CopyOptions) -> SyncReport:
    """Copy from the node that pulled to the others, as ``model sync`` does (resumable, data network first)."""
    def site(i: int) -> Site:
        layout, dest = dests[i]
        node = recipe.nodes[i]
        return Site(node.host, runners[i], model_dir(layout, dest, snap.repo, snap.commit), node)

    source = site(via)
    ref = Listing(source.path, {f: snap.sizes[f] for names in need.values() for f in names})
    cancel = threading.Event()
    targets = {i: i for i in need if i != via}
    results, errors = parallel(targets, lambda i: copy_to(source, site(i), need[i], ref, options, cancel),
                               cancel, options.max_parallel)
    report = SyncReport(source.host, source.path, [results[i] for i in sorted(results)])
    for i, exc in errors.items():
        report.nodes.append(copy_failed(recipe.nodes[i].host, site(i).path, need[i], source.host, exc))
    return report


def copy_failed(host: str, dest: str, files: list[str], source: str, exc: Exception) -> NodeSync:
    return NodeSync(host, dest, files, 0, source=source, method="failed", error=str(exc))


def pull(ref: str, recipe: Recipe | None = None, *, runners: dict[int, Runner] | None = None,
         via: str | None = None, python: str | None = None, workers: int = 4, dry_run: bool = False,
         on_progress: ProgressFn = no_progress, options: CopyOptions | None = None) -> PullReport:
    """Download ``ref`` (``org/name[@revision]``) where the recipe's nodes need it; see the module docstring."""
    r, repo, rev = pull_recipe(ref, recipe)
    runners = runners or runners_for(r, ssh_config=default_ssh_config())
    token = hub.token()
    snap = hub.snapshot(repo, rev, hf_token=token)
    small = hub.small_files(snap, ["config.json", INDEX], hf_token=token)
    index = small.get(INDEX)
    need = selection(r, wanted_files(snap, index), small.get("config.json") or {}, index_map(index))
    via_index = None
    if via is not None:
        via_index = next((i for i, n in enumerate(r.nodes) if n.host == via), None)
        if via_index is None:
            raise HubError(f"--via {via}: no such node in the recipe",
                           fix="Name a node host: " + ", ".join(n.host for n in r.nodes) + ".")
    mode, via_index = choose_mode(need, snap.sizes, via_index)
    report = PullReport(repo, snap.revision, snap.commit, mode, r.nodes[via_index].host if via_index is not None
                        else None)
    if r.model.revision != snap.commit and recipe is not None:
        report.notes.append(f"pin it: --set model.revision={snap.commit} (or put it in the recipe) so every start "
                            "loads this commit")
    return _run(r, runners, snap, need, report, python=python, workers=workers, token=token, dry_run=dry_run,
                on_progress=on_progress, options=options or CopyOptions(on_progress=on_progress))


def _start_all(r: Recipe, runners: dict[int, Runner], snap: HubSnapshot, files: dict[int, list[str]],
               dests: dict[int, tuple[str, str]], pythons: dict[int, str], *, workers: int,
               token: str | None) -> dict[int, PullJob]:
    started: dict[int, PullJob] = {}
    try:
        for i, names in files.items():
            layout, dest = dests[i]
            started[i] = start_pull(r, i, runners[i], snap, names, layout, dest, python=pythons[i], workers=workers,
                                    token=token)
    except BaseException:
        for p in started.values():
            jobs.stop(p.job)
        raise
    return started


def _run(r: Recipe, runners: dict[int, Runner], snap: HubSnapshot, need: dict[int, list[str]], report: PullReport,
         *, python: str | None, workers: int, token: str | None, dry_run: bool, on_progress: ProgressFn,
         options: CopyOptions) -> PullReport:
    found = fan_out(((i, i) for i in runners), lambda i: node_dest(r, i, runners[i]))
    found.raise_first()
    dests = found.results
    via = next((i for i, n in enumerate(r.nodes) if n.host == report.via), None)
    if dry_run:
        report.nodes = [NodePull(r.nodes[i].host, dests[i][1], dests[i][0], need[i],
                                 sum(snap.sizes[f] for f in need[i]), via=report.via if i != via else None)
                        for i in sorted(need)]
        return report
    pythons = {i: node_python(r, i, python) for i in runners}
    fan_out(((i, i) for i in runners), lambda i: check_python(runners[i], pythons[i])).raise_first()
    first = {via: sorted({f for names in need.values() for f in names})} if via is not None else need
    pulls = _start_all(r, runners, snap, first, dests, pythons, workers=workers, token=token)
    watch(pulls, on_progress)
    items = {i: p.item for i, p in pulls.items()}
    if via is not None and items[via].error is None:
        report.fanout = _fan_out(r, runners, snap, via, need, dests, options)
        copied = {n.host: n for n in report.fanout.nodes}
        checks = _start_all(r, runners, snap, {i: need[i] for i in need if i != via}, dests, pythons,
                            workers=workers, token=token)
        watch(checks, on_progress)
        for i, p in checks.items():
            p.item.via = report.via
            p.item.seconds = copied[p.item.host].seconds
            p.item.error = copied[p.item.host].error or p.item.error
            items[i] = p.item
    report.nodes = [items.get(i) or NodePull(r.nodes[i].host, dests[i][1], dests[i][0], need[i], 0,
                                             error="not reached: the node that pulled failed")
                    for i in sorted(need)]
    return report
