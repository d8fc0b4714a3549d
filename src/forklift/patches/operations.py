"""Patch targets and the operations forklift runs on them: status, apply, verify, revert, check.

Targets ("trees") are a vLLM package directory reached three ways:

- ``DirTree``: a directory on this machine (a venv's site-packages/vllm, or a copy of one);
- ``RunnerTree``: the vLLM of a node's Python, through a Runner. Every file operation is one argv
  ``[python, "-c", <core.py source>, OP, ROOT, ...]``; file contents travel as base64 JSON;
- ``ReleaseTree``: a published release's files (read-only), for ``forklift patch check``.

The text engine lives in ``core`` (standard library only, so the same code runs on nodes and in
containers); this module translates its errors into forklift's error tree once, here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from forklift.errors import (
    EngineNotInstalledError,
    PatchConflictError,
    PatchError,
    PatchReadOnlyError,
    PatchVerifyError,
    PatchVersionError,
)
from forklift.patches import core, releases
from forklift.patches.spec import Patch
from forklift.recipe.schema import PatchRef

if TYPE_CHECKING:  # the Runner protocol only; patches sit below cluster in the import stack
    from forklift.runner import Runner

def _translate(exc: core.CoreError) -> PatchError:
    if exc.kind in ("drift", "vanished", "modified"):
        fixes = {
            "drift": f"The vLLM source changed under patch {exc.patch_id}: update its anchors "
                     "(`forklift patch show ID`) or use a vLLM version it is for.",
            "vanished": f"This vLLM no longer has what patch {exc.patch_id} changes; drop it from the recipe "
                        "if the problem it fixed is gone, or port the patch.",
            "modified": "Reinstall vLLM (or `forklift patch revert`) to get pristine files, then apply again.",
        }
        return PatchConflictError(str(exc), patch_id=exc.patch_id, kind=exc.kind, file=exc.file,
                                  problems=exc.problems, fix=fixes[exc.kind])
    if exc.kind == "version":
        return PatchVersionError(str(exc), fix="Use a vLLM version in the patch's range, check it with "
                                 "`forklift patch check --against vllm==X`, or pass --ignore-version.")
    if exc.kind == "readonly":
        return PatchReadOnlyError(str(exc), fix="Patch a vLLM you own (a venv, or a container at start); "
                                  "make the install writable if it was locked on purpose.")
    if exc.kind == "verify":
        return PatchVerifyError(str(exc), fix="The patch definition is wrong; it was rolled back.")
    return PatchError(str(exc))


# ---------------------------------------------------------------------------------------------------
# Trees


class Tree(Protocol):
    label: str
    version: str | None

    def read(self, rel: str) -> bytes | None: ...

    def write(self, files: dict[str, bytes]) -> None: ...

    def delete(self, rels: list[str]) -> None: ...

    def unwritable(self, rels: list[str]) -> str | None: ...


def dir_tree(root: str | Path, *, version: str | None = None) -> core.DirTree:
    """A vLLM package directory on this machine (``.../site-packages/vllm``)."""
    root = Path(root)
    if not root.is_dir():
        raise EngineNotInstalledError(f"{root}: no such directory", fix="Point at the `vllm` package directory.")
    return core.DirTree(str(root), version)


@cache
def core_source() -> str:
    """core.py's text: the program run on nodes and in containers."""
    return Path(core.__file__).read_text(encoding="utf-8")


class RunnerTree:
    """The vLLM package of a node's Python, read and written through a Runner."""

    def __init__(self, runner: Runner, python: str, root: str, version: str | None) -> None:
        self.runner = runner
        self.python = python
        self.root = root
        self.version = version
        self.label = f"{runner.host}:{root}"

    def _call(self, op: str, *args: str, payload: dict[str, str] | None = None) -> Any:
        argv = [self.python, "-c", core_source(), op, self.root, *args]
        done = self.runner.run(argv, timeout=120, input=json.dumps(payload) if payload is not None else None)
        done.check()
        try:
            return json.loads(done.stdout)
        except ValueError as exc:
            raise PatchError(f"{self.runner.host}: unexpected output from the patch helper: {done.stdout[:200]!r}",
                             fix=f"Check that {self.python} on {self.runner.host} is a working Python 3.10+.") from exc

    def read(self, rel: str) -> bytes | None:
        out = self._call("read", rel)
        val = out.get(rel)
        return None if val is None else base64.b64decode(val)

    def write(self, files: dict[str, bytes]) -> None:
        self._call("write", payload={k: base64.b64encode(v).decode("ascii") for k, v in files.items()})

    def delete(self, rels: list[str]) -> None:
        self._call("delete", *rels)

    def unwritable(self, rels: list[str]) -> str | None:
        reason = self._call("unwritable", *rels).get("reason")
        return str(reason) if reason else None


def locate(runner: Runner, python: str) -> dict[str, Any]:
    """Where the node's Python finds vllm, and its version; runs ``python -c <core> locate``.

    Uses ``importlib.util.find_spec`` (no import of vllm, which takes seconds).
    """
    done = runner.run([python, "-c", core_source(), "locate"], timeout=60)
    if not done.ok:
        tail = done.stderr.strip().splitlines()[-1:] or [""]
        raise EngineNotInstalledError(f"{runner.host}: `{python}` could not run the patch helper: {tail[0]}",
                                      fix=f"Check that {python} exists on {runner.host} and is Python 3.10+.")
    info: dict[str, Any] = json.loads(done.stdout)
    if not info.get("root"):
        raise EngineNotInstalledError(f"{runner.host}: vllm is not importable by {python}",
                                      fix="Install vLLM into that environment, or pass the right --python.")
    return info


def open_tree(runner: Runner, python: str) -> Tree:
    """The vLLM package of ``python`` on the runner's host (every file operation goes through the runner)."""
    info = locate(runner, python)
    return RunnerTree(runner, python, info["root"], info.get("version"))


class ReleaseTree:
    """A published release's files (read-only)."""

    def __init__(self, version: str, archive: Path) -> None:
        self.version: str | None = version
        self.archive = releases.ReleaseArchive(archive)
        self.label = f"vllm=={version}"

    def read(self, rel: str) -> bytes | None:
        return self.archive.read(rel)

    def prefetch(self, patches: Sequence[Patch]) -> None:
        rels = [r for p in patches for f in p.files for m in f.modules for r in core.module_candidates(m)]
        rels += [core.record_rel(p.id) for p in patches]
        self.archive.prefetch(rels)

    def write(self, files: dict[str, bytes]) -> None:
        raise PatchReadOnlyError(f"{self.label}: a release archive is read-only")

    def delete(self, rels: list[str]) -> None:
        raise PatchReadOnlyError(f"{self.label}: a release archive is read-only")

    def unwritable(self, rels: list[str]) -> str | None:
        return "a release archive is read-only"


# ---------------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class PatchedFile:
    path: str
    module: str
    original_sha256: str | None
    patched_sha256: str | None


@dataclass(frozen=True)
class AppliedPatch:
    """What the run record keeps for one patch on one node."""

    id: str
    marker: str
    host: str
    vllm_root: str
    vllm_version: str | None
    action: str  # applied | already-applied | present | would-apply
    files: tuple[PatchedFile, ...]

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "marker": self.marker, "host": self.host, "vllm_root": self.vllm_root,
                "vllm_version": self.vllm_version, "action": self.action,
                "files": [f.__dict__ for f in self.files]}


@dataclass(frozen=True)
class VerifyResult:
    id: str
    ok: bool
    problems: tuple[str, ...]


@dataclass(frozen=True)
class RevertResult:
    id: str
    action: str  # reverted | not-applied | would-revert
    files: tuple[str, ...]


@dataclass
class CompatReport:
    """Patch x release compatibility, for ``forklift patch check``."""

    versions: list[str]
    patches: list[Patch]
    cells: dict[tuple[str, str], core.PatchState] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "versions": self.versions,
            "patches": [
                {"id": p.id, "vllm": p.vllm,
                 "results": {v: self.cells[(p.id, v)].to_json() for v in self.versions}}
                for p in self.patches
            ],
        }


def _host_root(tree: Tree) -> tuple[str, str]:
    host, _, root = tree.label.partition(":")
    return (host, root) if root else ("localhost", tree.label)


def _applied(tree: Tree, patch: Patch, res: dict[str, Any]) -> AppliedPatch:
    host, root = _host_root(tree)
    files = tuple(PatchedFile(f["rel"], f.get("module", ""), f.get("original_sha256"), f.get("patched_sha256"))
                  for f in res["files"])
    return AppliedPatch(patch.id, patch.log_marker, host, root, tree.version, str(res["action"]), files)


# ---------------------------------------------------------------------------------------------------
# Operations


def status(tree: Tree, patches: Sequence[Patch]) -> list[core.PatchState]:
    """Per patch: applicable / applied / present / drift / vanished / modified, with what differs."""
    return [core.status(tree, p.to_core()) for p in patches]


class _Overlay:
    """A tree whose writes stay in memory: apply every patch here first, then for real."""

    def __init__(self, base: Tree) -> None:
        self.base = base
        self.label = base.label
        self.version = base.version
        self.files: dict[str, bytes | None] = {}

    def read(self, rel: str) -> bytes | None:
        return self.files[rel] if rel in self.files else self.base.read(rel)

    def write(self, files: dict[str, bytes]) -> None:
        self.files.update(files)

    def delete(self, rels: list[str]) -> None:
        self.files.update(dict.fromkeys(rels))

    def unwritable(self, rels: list[str]) -> str | None:
        return self.base.unwritable(rels)


def _apply_all(tree: Tree, patches: Sequence[Patch], *, ignore_version: bool,
               any_version: Collection[str] = ()) -> list[AppliedPatch]:
    out = []
    for p in patches:
        try:
            res = core.apply(tree, p.to_core(), ignore_version=ignore_version or p.id in any_version)
            failures = core.verify(tree, p.to_core())
            if failures:
                raise core.CoreError("verify", p.id, f"patch {p.id}: " + "; ".join(failures))
        except core.CoreError as exc:
            raise _translate(exc) from exc
        out.append(_applied(tree, p, res))
    return out


def apply(tree: Tree, patches: Sequence[Patch], *, dry_run: bool = False,
          ignore_version: bool = False, any_version: Collection[str] = ()) -> list[AppliedPatch]:
    """Apply and verify each patch, in order; a patch already applied (or already present) is a no-op.

    Every patch is first applied to an in-memory overlay of the tree (so patches stacked on one file
    are checked in order): if any cannot apply, nothing at all is written. ``dry_run`` stops there.
    ``any_version``: ids applied whatever the vLLM version (a recipe's ``any_version: true`` entries).
    """
    planned = _apply_all(_Overlay(tree), patches, ignore_version=ignore_version, any_version=any_version)
    if dry_run:
        return [AppliedPatch(a.id, a.marker, a.host, a.vllm_root, a.vllm_version,
                             "would-apply" if a.action == "applied" else a.action, a.files) for a in planned]
    return _apply_all(tree, patches, ignore_version=ignore_version, any_version=any_version)


def verify(tree: Tree, patches: Sequence[Patch]) -> list[VerifyResult]:
    return [VerifyResult(p.id, not (fails := core.verify(tree, p.to_core())), tuple(fails)) for p in patches]


def revert(tree: Tree, patches: Sequence[Patch], *, dry_run: bool = False) -> list[RevertResult]:
    """Restore the kept originals byte for byte (in reverse order of the list)."""
    out = []
    for p in reversed(list(patches)):
        try:
            res = core.revert(tree, p.to_core(), dry_run=dry_run)
        except core.CoreError as exc:
            raise _translate(exc) from exc
        out.append(RevertResult(p.id, str(res["action"]), tuple(f["rel"] for f in res["files"])))
    return list(reversed(out))


def apply_for_recipe(runner: Runner, python: str, entries: Sequence[str | PatchRef]) -> list[AppliedPatch]:
    """What ``forklift up`` calls on every node before starting (venv runtime): apply and verify the recipe's
    patches (ids, or recipe entries whose ``any_version`` allows any vLLM version).

    Raises a PatchError subclass (nothing of a failing patch written) when one cannot apply.
    """
    from forklift.patches.spec import get

    if not entries:
        return []
    refs = [PatchRef(id=e) if isinstance(e, str) else e for e in entries]
    patches = get([r.id for r in refs])
    anyv = {p.id for p, r in zip(patches, refs, strict=True) if r.any_version}
    return apply(open_tree(runner, python), patches, any_version=anyv)


def check_releases(versions: Sequence[str], patches: Sequence[Patch], *,
                   index_url: str = releases.DEFAULT_INDEX,
                   extra: dict[str, Tree] | None = None) -> CompatReport:
    """Status of every patch against every release's files (fetched once, cached); nothing is written."""
    report = CompatReport(versions=[], patches=list(patches))
    trees: list[tuple[str, Tree]] = list((extra or {}).items())
    for v in versions:
        rt = ReleaseTree(v, releases.fetch(v, index_url=index_url))
        rt.prefetch(patches)
        trees.append((v, rt))
    for name, tree in trees:
        report.versions.append(name)
        for p in patches:
            report.cells[(p.id, name)] = core.status(tree, p.to_core())
    return report
