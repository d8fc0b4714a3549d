"""A recipe's patches: resolved against the catalog (unknown ids refused before anything renders), the notes
``plan`` and ``render`` show, the files a container gets, and what the containers' logs prove was applied.

With the docker runtime nothing is applied from outside: ``up`` writes ``patches.json`` (the definitions) and
``forklift_patch_core.py`` (the engine, ``core.py``) into each node's run folder, ``render`` mounts both
beside the launcher at ``/opt/forklift/``, and the launcher applies and verifies every patch before vLLM is
imported, logging one line per file with its sha256. ``up`` reads those lines back into the run record.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forklift.errors import PatchError, RecipeError
from forklift.patches import core
from forklift.patches.operations import core_source
from forklift.patches.spec import Patch, catalog, get
from forklift.recipe.schema import PatchRef, Recipe

if TYPE_CHECKING:  # the Runner protocol only, as in engine.py
    from forklift.runner import Runner

CONTAINER_DIR = "/opt/forklift"
SPEC_FILE = "patches.json"
CORE_FILE = "forklift_patch_core.py"
"""Must equal ``engine/vllm_main.py``'s CORE_FILE: the launcher finds the engine beside the spec."""
PATCHES_ENV = "FORKLIFT_PATCHES"
EXEC_FLAG = "--forklift-exec"
_LINE_RE = re.compile(r"^(?P<marker>\[[^\]]+\]) (?P<verb>applied to|already applied to|present in) "
                      r"(?P<file>\S+) \(sha256 (?P<sha>[0-9a-f]{64})\) on vLLM (?P<version>\S+)$")
_ACTIONS = {"applied to": "applied", "already applied to": "already-applied", "present in": "present"}


@dataclass(frozen=True)
class Resolved:
    """A recipe entry and the patch it names."""

    ref: PatchRef
    patch: Patch


def resolve(recipe: Recipe, known: dict[str, Patch] | None = None) -> list[Resolved]:
    """Every recipe patch entry with its definition; an unknown id is a RecipeError naming the closest one."""
    if not recipe.patches:
        return []
    known = catalog() if known is None else known
    out = []
    for i, ref in enumerate(recipe.patches):
        try:
            (patch,) = get([ref.id], known)
        except PatchError as exc:
            close = difflib.get_close_matches(ref.id, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise RecipeError(f"patches[{i}]: unknown patch {ref.id!r}{hint}",
                              fix="`forklift patch list` shows the known patches (your own go in "
                              "$FORKLIFT_HOME/patches/ID.yaml).") from exc
        out.append(Resolved(ref, patch))
    return out


def notes(recipe: Recipe) -> list[str]:
    """What ``plan`` and ``render`` say about the recipe's patches (raises RecipeError for an unknown id)."""
    resolved = resolve(recipe)
    if not resolved:
        return []
    where = ("in each container, by forklift's launcher, before vLLM is imported" if recipe.runtime.kind == "docker"
             else "on each node's vLLM by `up` before any rank starts")
    out = [f"patches {', '.join(r.patch.id for r in resolved)}: applied and verified {where}"]
    for r in resolved:
        if r.ref.any_version:
            out.append(f"patch {r.patch.id} is for vllm{r.patch.vllm} but is applied whatever the vLLM version "
                       f"(any_version): {r.ref.because}")
    return out


def container_spec(recipe: Recipe) -> str:
    """``patches.json``: every patch definition, with its version override, for ``core.container_apply``."""
    entries = [{"patch": r.patch.to_core().to_json(), "ignore_version": r.ref.any_version,
                "because": r.ref.because} for r in resolve(recipe)]
    return json.dumps({"format": core.SPEC_FORMAT, "patches": entries}, indent=1, sort_keys=True) + "\n"


def container_file_names(recipe: Recipe) -> list[str]:
    """The files each container of this recipe gets at CONTAINER_DIR (none without docker or patches)."""
    return [CORE_FILE, SPEC_FILE] if recipe.runtime.kind == "docker" and recipe.patches else []


def container_files(recipe: Recipe) -> dict[str, str]:
    """File name -> text, written into each node's run folder and mounted at CONTAINER_DIR (docker only)."""
    if not container_file_names(recipe):
        return {}
    return {SPEC_FILE: container_spec(recipe), CORE_FILE: core_source()}


def planned(recipe: Recipe) -> list[dict[str, Any]]:
    """The run record's entries before the containers start: what each container will apply."""
    return [{"id": r.patch.id, "marker": r.patch.log_marker, "vllm": r.patch.vllm, "any_version": r.ref.any_version,
             "because": r.ref.because, "action": "in-container", "files": []} for r in resolve(recipe)]


def parse_log(lines: Iterable[str], host: str, recipe: Recipe) -> list[dict[str, Any]]:
    """The marker lines of one container's log -> one entry per patch (files with their sha256 after patching)."""
    by_marker = {r.patch.log_marker: r for r in resolve(recipe)}
    found: dict[str, dict[str, Any]] = {}
    for line in lines:
        m = _LINE_RE.match(line.strip())
        if m is None or m["marker"] not in by_marker:
            continue
        r = by_marker[m["marker"]]
        entry = found.setdefault(r.patch.id, {
            "id": r.patch.id, "marker": r.patch.log_marker, "host": host, "vllm_version": m["version"],
            "vllm": r.patch.vllm, "any_version": r.ref.any_version, "because": r.ref.because,
            "action": _ACTIONS[m["verb"]], "files": []})
        entry["files"].append({"path": m["file"], "patched_sha256": m["sha"]})
    return list(found.values())


def read_applied(runner: Runner, log_path: str, host: str, recipe: Recipe) -> list[dict[str, Any]]:
    """``parse_log`` over the marker lines of a log on the runner's host (grep, not the whole log)."""
    markers = [r.patch.log_marker for r in resolve(recipe)]
    if not markers:
        return []
    argv = ["grep", "-a", "-F", *[a for m in markers for a in ("-e", m)], log_path]
    res = runner.run(argv, timeout=60)
    return parse_log(res.stdout.splitlines(), host, recipe) if res.returncode in (0, 1) else []


def pins(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``record.Pins.patches`` items (id, host, {file: sha256}) from run-record entries of either runtime."""
    out = []
    for e in entries:
        root = str(e.get("vllm_root") or "").rstrip("/")
        base = root.rsplit("/", 1)[-1] + "/" if root else ""  # venv entries: paths inside the vllm package
        files = {base + str(f.get("path")): str(f.get("patched_sha256")) for f in e.get("files", [])
                 if f.get("patched_sha256")}
        if files:
            out.append({"id": e["id"], "host": e.get("host"), "files": files})
    return out
