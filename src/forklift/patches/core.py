"""The patch engine's core: standard library only, so the same file also runs as a program on a node.

forklift imports it as a module. On a remote node it runs as ``python -c <this file's source> OP ARGS``
(file reads and writes for the Runner). Inside a docker container forklift's launcher
(``engine/vllm_main.py``) loads it from the run folder mounted at /opt/forklift/ and calls
``container_apply_file`` before vLLM is imported (the standalone ``forklift patch entrypoint`` script runs
it with ``entry SPEC_JSON``). Keep it free of forklift imports and
third-party imports (``packaging`` is imported lazily; every vLLM environment has it).

A patch changes one or more files of a vLLM tree. Each file is named by a dotted module (with
alternatives for modules that moved). Each edit's anchor is an exact snippet (``old``), optionally
scoped to a function or method located by AST (``function``) whose signature must equal
``signature``. Nothing is written unless every edit of every file of the patch matches exactly once.
Originals are kept under ``<vllm>/.forklift-patches/`` with their sha256, so revert is byte-identical.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import difflib
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

STATE_DIR = ".forklift-patches"
RECORD_FORMAT = 1

# ---------------------------------------------------------------------------------------------------
# Patch definitions (plain data; forklift.patches.spec validates the YAML and builds these)


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (exactly once, inside ``function`` when given) with ``new``.

    With ``function`` and no ``old``, the whole function (decorators included) is replaced.
    """

    new: str
    old: str | None = None
    function: str | None = None
    signature: str | None = None


@dataclass(frozen=True)
class Check:
    """Evidence that the patched behaviour is present: a function (with a signature) and/or a snippet."""

    contains: str | None = None
    function: str | None = None
    signature: str | None = None


@dataclass(frozen=True)
class FileSpec:
    modules: tuple[str, ...]
    edits: tuple[Edit, ...]
    verify: tuple[Check, ...] = ()


@dataclass(frozen=True)
class PatchDef:
    id: str
    description: str
    vllm: str
    marker: str
    files: tuple[FileSpec, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> PatchDef:
        files = tuple(
            FileSpec(
                modules=tuple(f["modules"]),
                edits=tuple(Edit(**e) for e in f["edits"]),
                verify=tuple(Check(**c) for c in f.get("verify", ())),
            )
            for f in d["files"]
        )
        return PatchDef(d["id"], d["description"], d["vllm"], d["marker"], files)


# ---------------------------------------------------------------------------------------------------
# Errors (forklift.patches.operations translates them into forklift's error tree)


class CoreError(Exception):
    """A patch cannot be applied, verified or reverted. ``kind`` is a stable word for tables and JSON."""

    def __init__(self, kind: str, patch_id: str, message: str, *, file: str | None = None,
                 problems: list[str] | None = None) -> None:
        self.kind = kind
        self.patch_id = patch_id
        self.file = file
        self.problems = list(problems or [])
        super().__init__(message)


class Drift(Exception):
    """An anchor did not match; ``problems`` says what differs."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


class Vanished(Drift):
    """The function an anchor names is not in the file at all."""


# ---------------------------------------------------------------------------------------------------
# Text engine


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def module_candidates(module: str) -> list[str]:
    """'vllm.a.b' -> ['a/b.py', 'a/b/__init__.py'] (paths relative to the vllm package dir)."""
    parts = module.split(".")
    if parts[0] != "vllm" or len(parts) < 2 or not all(p.isidentifier() for p in parts):
        raise ValueError(f"{module!r} is not a dotted module inside vllm (e.g. vllm.model_executor.models.llama)")
    rel = "/".join(parts[1:])
    return [rel + ".py", rel + "/__init__.py"]


def _signature_of(args: ast.arguments, returns: ast.expr | None) -> str:
    sig = "(" + ast.unparse(args) + ")"
    return sig + (" -> " + ast.unparse(returns) if returns is not None else "")


def normalize_signature(sig: str) -> str:
    """Formatting-independent form of '(a: int, *args) -> None'."""
    try:
        tree = ast.parse(f"def _f{sig.strip()}:\n    pass\n")
    except SyntaxError as exc:
        raise ValueError(f"signature {sig!r} does not parse: {exc.msg}") from exc
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    return _signature_of(fn.args, fn.returns)


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def find_functions(tree: ast.Module, qualname: str) -> list[FunctionNode]:
    """Every def whose dotted path (classes and enclosing functions) equals qualname."""
    found: list[FunctionNode] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{node.name}"
                if name == qualname and not isinstance(node, ast.ClassDef):
                    found.append(node)
                walk(node.body, name + ".")
            elif isinstance(node, ast.If | ast.Try | ast.With):
                for sub in ("body", "orelse", "finalbody", "handlers"):
                    walk(_stmts(getattr(node, sub, [])), prefix)

    walk(tree.body, "")
    return found


def _stmts(items: list[Any]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for it in items:
        if isinstance(it, ast.ExceptHandler):
            out.extend(it.body)
        elif isinstance(it, ast.stmt):
            out.append(it)
    return out


def _all_qualnames(tree: ast.Module) -> list[str]:
    names: list[str] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                if not isinstance(node, ast.ClassDef):
                    names.append(prefix + node.name)
                walk(node.body, prefix + node.name + ".")

    walk(tree.body, "")
    return names


def _line_offsets(text: str) -> list[int]:
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    return offsets


def _span(text: str, node: FunctionNode) -> tuple[int, int]:
    offs = _line_offsets(text)
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    return offs[first - 1], offs[min(end, len(offs) - 1)]


def _parse(text: str, where: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as exc:
        raise Drift([f"{where} does not parse as Python (line {exc.lineno}: {exc.msg})"]) from exc


def locate_function(text: str, qualname: str, signature: str | None) -> tuple[int, int]:
    """Char span of the one def named qualname, whose signature must equal ``signature`` when given."""
    tree = _parse(text, "file")
    nodes = find_functions(tree, qualname)
    if not nodes:
        close = difflib.get_close_matches(qualname, _all_qualnames(tree), n=3, cutoff=0.6)
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise Vanished([f"function {qualname} not found{hint}"])
    if len(nodes) > 1:
        lines = ", ".join(str(n.lineno) for n in nodes)
        raise Drift([f"function {qualname} is defined {len(nodes)} times (lines {lines}); the anchor is ambiguous"])
    node = nodes[0]
    if signature is not None:
        want = normalize_signature(signature)
        have = _signature_of(node.args, node.returns)
        if want != have:
            raise Drift([f"function {qualname} (line {node.lineno}) has signature {have}, patch expects {want}"])
    return _span(text, node)


def _what_differs(text: str, start: int, region: str, snippet: str) -> str:
    """Where the snippet most likely went, and its first line that differs from the file."""
    snip = snippet.splitlines()
    lines = region.splitlines()
    first = next((k for k, ln in enumerate(snip) if ln.strip()), None)
    if first is None or not lines:
        return ""
    key = snip[first].strip()
    cands = [i for i, ln in enumerate(lines) if ln.strip() == key]
    if not cands:
        stripped = [ln.strip() for ln in lines]
        close = difflib.get_close_matches(key, stripped, n=1, cutoff=0.5)
        if not close:
            return ""
        cands = [stripped.index(close[0])]
    base = text.count("\n", 0, start) + 1
    top = cands[0] - first
    for k, want in enumerate(snip):
        i = top + k
        have = lines[i] if 0 <= i < len(lines) else "<end of scope>"
        if have != want:
            return f"; at line {base + i}: file has {have!r}, patch expects {want!r}"
    return ""


def _short(s: str, n: int = 60) -> str:
    s = s.strip()
    return s if len(s) <= n else s[: n - 3] + "..."


def _decorators(tree: ast.Module) -> dict[str, list[str]]:
    """Dotted path of every class and def -> its decorators' source."""
    out: dict[str, list[str]] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                out[prefix + node.name] = [ast.unparse(d) for d in node.decorator_list]
                walk(node.body, prefix + node.name + ".")

    walk(tree.body, "")
    return out


def stolen_decorators(before: str, after: str) -> list[str]:
    """Definitions that lost their decorators to a definition the edit inserted between them (an anchor that
    starts at ``class X`` when ``@decorator`` sits above it)."""
    old, new = _decorators(ast.parse(before)), _decorators(ast.parse(after))
    lost = {name: decs for name, decs in old.items() if decs and name in new and not new[name]}
    added = {name: decs for name, decs in new.items() if name not in old and decs}
    return [f"{name} lost its decorators {', '.join('@' + d for d in decs)} to the inserted {thief}"
            for name, decs in lost.items() for thief, got in added.items() if got == decs]


def apply_edits(text: str, edits: tuple[Edit, ...] | list[Edit]) -> str:
    """The text with every edit applied in order; raises Drift listing every anchor that did not match."""
    original = text
    problems: list[str] = []
    vanished = 0
    for i, e in enumerate(edits, 1):
        where = f"function {e.function}" if e.function else "file"
        try:
            start, end = locate_function(text, e.function, e.signature) if e.function else (0, len(text))
        except Vanished as exc:
            vanished += len(exc.problems)
            problems.extend(f"edit {i}: {p}" for p in exc.problems)
            continue
        except Drift as exc:
            problems.extend(f"edit {i}: {p}" for p in exc.problems)
            continue
        region = text[start:end]
        if e.old is None:
            text = text[:start] + e.new + text[end:]
            continue
        count = region.count(e.old)
        if count == 0:
            problems.append(f"edit {i}: snippet {_short(e.old)!r} not found in {where}"
                            f"{_what_differs(text, start, region, e.old)}")
            continue
        if count > 1:
            lines = []
            pos = region.find(e.old)
            while pos >= 0:
                lines.append(str(text.count("\n", 0, start + pos) + 1))
                pos = region.find(e.old, pos + 1)
            problems.append(f"edit {i}: snippet {_short(e.old)!r} matches {count} times in {where} "
                            f"(lines {', '.join(lines)}); an anchor must match exactly once")
            continue
        pos = start + region.find(e.old)
        text = text[:pos] + e.new + text[pos + len(e.old):]
    if problems:
        raise (Vanished if vanished == len(problems) else Drift)(problems)
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise Drift([f"patched file does not parse (line {exc.lineno}: {exc.msg}); the replacement is wrong"]) from exc
    stolen = stolen_decorators(original, text)
    if stolen:
        raise Drift([f"the replacement is wrong: {s}; include the decorator lines in the anchor" for s in stolen])
    return text


def check_text(text: str, checks: tuple[Check, ...] | list[Check]) -> list[str]:
    """Failures of the verification checks (empty = the patched behaviour is present)."""
    failures: list[str] = []
    try:
        ast.parse(text)
    except SyntaxError as exc:
        return [f"file does not parse (line {exc.lineno}: {exc.msg})"]
    for c in checks:
        try:
            start, end = locate_function(text, c.function, c.signature) if c.function else (0, len(text))
        except Drift as exc:
            failures.extend(exc.problems)
            continue
        if c.contains is not None and c.contains not in text[start:end]:
            where = f"function {c.function}" if c.function else "file"
            failures.append(f"{where} lacks {_short(c.contains)!r}")
    return failures


# ---------------------------------------------------------------------------------------------------
# Trees: a vLLM package directory, read and written by paths relative to it


def read_version(root: str) -> str | None:
    """vLLM's version from <root>/_version.py, else from a dist-info beside the package."""
    try:
        with open(os.path.join(root, "_version.py"), encoding="utf-8") as f:
            m = re.search(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", f.read(), re.M)
        if m:
            return m.group(1)
    except OSError:
        pass
    parent = os.path.dirname(os.path.abspath(root))
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return None
    for entry in entries:
        if re.match(r"vllm(_cpu)?-[^-]+\.dist-info$", entry, re.I):
            return entry.split("-")[1].removesuffix(".dist-info")
    return None


def locate_vllm() -> dict[str, Any]:
    """Where the importable vllm package lives, found without importing it (importing takes seconds)."""
    import importlib.util

    override = os.environ.get("FORKLIFT_VLLM_DIR")
    if override:
        root = override
    else:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            return {"root": None, "version": None, "python": sys.executable}
        root = list(spec.submodule_search_locations)[0]
    return {"root": os.path.abspath(root), "version": read_version(root), "python": sys.executable}


def unwritable_reason(path: str) -> str | None:
    """Why path (a file, or a directory we must create files in) must not be written, else None.

    os.access alone is useless as root (root passes every permission check), so this also refuses a
    read-only filesystem (docker ``:ro`` mounts, read-only images) and files or directories that
    carry no write bit for anyone (an install someone deliberately locked with ``chmod a-w``).
    """
    try:
        st = os.stat(path)
        vfs = os.statvfs(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if vfs.f_flag & os.ST_RDONLY:
        return f"{path} is on a read-only filesystem"
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is read-only (mode {stat.filemode(st.st_mode)})"
    need = os.W_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)
    if not os.access(path, need):
        return f"{path} is not writable by this user"
    return None


class DirTree:
    """A vLLM package directory on this machine."""

    def __init__(self, root: str, version: str | None = None, *, label: str | None = None) -> None:
        self.root = os.path.abspath(root)
        self.version = version if version is not None else read_version(self.root)
        self.label = label or self.root

    def path(self, rel: str) -> str:
        full = os.path.normpath(os.path.join(self.root, rel))
        if not full.startswith(self.root + os.sep):
            raise ValueError(f"{rel!r} escapes {self.root}")
        return full

    def read(self, rel: str) -> bytes | None:
        try:
            with open(self.path(rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def unwritable(self, rels: list[str]) -> str | None:
        checks = [self.root]
        for rel in rels:
            full = self.path(rel)
            checks.append(full if os.path.exists(full) else os.path.dirname(full))
            if os.path.exists(full):
                checks.append(os.path.dirname(full))
        for p in dict.fromkeys(checks):
            if os.path.exists(p):
                why = unwritable_reason(p)
                if why:
                    return why
        return None

    def write(self, files: dict[str, bytes]) -> None:
        for rel, data in files.items():
            _atomic_write(self.path(rel), data)

    def delete(self, rels: list[str]) -> None:
        for rel in rels:
            full = self.path(rel)
            if os.path.exists(full):
                os.unlink(full)
        # prune empty state directories
        state = os.path.join(self.root, STATE_DIR)
        for dirpath, _dirs, _files in sorted(os.walk(state, topdown=False), reverse=False):
            if dirpath.startswith(state) and not os.listdir(dirpath):
                os.rmdir(dirpath)


def _atomic_write(full: str, data: bytes) -> None:
    d = os.path.dirname(full)
    os.makedirs(d, exist_ok=True)
    old = os.stat(full) if os.path.exists(full) else None
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".forklift-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            if hasattr(os, "chown") and os.geteuid() == 0:
                os.chown(tmp, old.st_uid, old.st_gid)
        else:
            os.chmod(tmp, 0o644)
        os.replace(tmp, full)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if full.endswith(".py"):  # stale bytecode must not outlive a same-size, same-second rewrite
        cache = os.path.join(d, "__pycache__")
        stem = os.path.basename(full)[:-3] + "."
        if os.path.isdir(cache):
            for name in os.listdir(cache):
                if name.startswith(stem) and name.endswith(".pyc"):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(cache, name))


# ---------------------------------------------------------------------------------------------------
# Engine: status / apply / verify / revert over a tree (anything with read/write/delete/unwritable)


@dataclass
class FileState:
    module: str
    rel: str | None
    status: str  # applicable | applied | present | drift | vanished | modified
    problems: list[str] = field(default_factory=list)
    sha256: str | None = None


@dataclass
class PatchState:
    patch_id: str
    version: str | None
    in_range: bool | None
    status: str  # applicable | applied | present | drift | vanished | modified
    files: list[FileState]
    record: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("record")
        return d


def record_rel(patch_id: str) -> str:
    return f"{STATE_DIR}/{patch_id}.json"


def original_rel(patch_id: str, rel: str) -> str:
    return f"{STATE_DIR}/{patch_id}/{rel}"


def version_in_range(version: str | None, spec: str) -> bool | None:
    """True/False, or None when the version is unknown or unparsable."""
    if version is None:
        return None
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return SpecifierSet(spec).contains(v, prereleases=True)


def load_record(tree: Any, patch_id: str) -> dict[str, Any] | None:
    raw = tree.read(record_rel(patch_id))
    if raw is None:
        return None
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _resolve(tree: Any, fs: FileSpec) -> tuple[str, str, bytes] | None:
    for module in fs.modules:
        for rel in module_candidates(module):
            data = tree.read(rel)
            if data is not None:
                return module, rel, data
    return None


def _classify_file(fs: FileSpec, module: str, rel: str, data: bytes,
                   rec_file: dict[str, Any] | None) -> tuple[FileState, bytes | None]:
    """State of one file, and its patched bytes when the patch can be applied to it.

    The verification decides "already there": with forklift's record it is ``applied`` (possibly with
    other patches stacked on the same file), without it ``present`` (upstream fixed it, or someone else).
    """
    digest = sha256(data)
    if rec_file is not None and rec_file.get("patched_sha256") == digest:
        return FileState(module, rel, "applied", sha256=digest), None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return FileState(module, rel, "drift", ["file is not UTF-8 text"], digest), None
    if not check_text(text, fs.verify):
        return FileState(module, rel, "applied" if rec_file is not None else "present", sha256=digest), None
    try:
        new = apply_edits(text, fs.edits).encode("utf-8")
    except Vanished as exc:
        return FileState(module, rel, "vanished", exc.problems, digest), None
    except Drift as exc:
        if rec_file is not None and rec_file.get("original_sha256") != digest:
            problems = [f"changed since forklift patched it (sha256 {digest[:12]}, patched was "
                        f"{str(rec_file.get('patched_sha256'))[:12]})", *exc.problems]
            return FileState(module, rel, "modified", problems, digest), None
        return FileState(module, rel, "drift", exc.problems, digest), None
    return FileState(module, rel, "applicable", sha256=digest), new


_ORDER = ["vanished", "drift", "modified", "applicable", "present", "applied"]


def _overall(states: list[FileState]) -> str:
    kinds = {s.status for s in states}
    for k in _ORDER[:3]:
        if k in kinds:
            return k
    if "applicable" in kinds:
        return "applicable"
    if kinds == {"applied"}:
        return "applied"
    return "present" if "present" in kinds and "applied" not in kinds else "applied"


def _plan(tree: Any, patch: PatchDef) -> tuple[PatchState, dict[str, bytes], dict[str, bytes]]:
    rec = load_record(tree, patch.id)
    rec_files = {f["rel"]: f for f in (rec or {}).get("files", []) if isinstance(f, dict) and "rel" in f}
    states: list[FileState] = []
    originals: dict[str, bytes] = {}
    patched: dict[str, bytes] = {}
    for fs in patch.files:
        hit = _resolve(tree, fs)
        if hit is None:
            tried = ", ".join(module_candidates(m)[0] for m in fs.modules)
            states.append(FileState(fs.modules[0], None, "vanished", [f"target vanished: no {tried} in this vLLM"]))
            continue
        module, rel, data = hit
        state, new = _classify_file(fs, module, rel, data, rec_files.get(rel))
        states.append(state)
        if new is not None:
            originals[rel] = data
            patched[rel] = new
    ps = PatchState(patch.id, tree.version, version_in_range(tree.version, patch.vllm), _overall(states), states, rec)
    return ps, originals, patched


def status(tree: Any, patch: PatchDef) -> PatchState:
    return _plan(tree, patch)[0]


def _describe(ps: PatchState, tree: Any) -> str:
    bad = [f for f in ps.files if f.status in ("drift", "vanished", "modified")]
    parts = [f"{f.rel or f.module}: {'; '.join(f.problems)}" for f in bad]
    return f"patch {ps.patch_id} on {tree.label} (vLLM {ps.version}): " + " | ".join(parts)


def require_version(tree: Any, patch: PatchDef, ignore_version: bool) -> None:
    if ignore_version:
        return
    ok = version_in_range(tree.version, patch.vllm)
    if ok is None:
        raise CoreError("version", patch.id, f"patch {patch.id}: cannot tell the vLLM version at {tree.label} "
                        f"({tree.version!r}); the patch is for vllm{patch.vllm}")
    if not ok:
        raise CoreError("version", patch.id, f"patch {patch.id} is for vllm{patch.vllm}, "
                        f"but {tree.label} has vLLM {tree.version}")


def apply(tree: Any, patch: PatchDef, *, ignore_version: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Apply one patch; a second apply is a no-op. Returns the record (what was kept and the hashes)."""
    require_version(tree, patch, ignore_version)
    ps, originals, patched = _plan(tree, patch)
    if ps.status in ("drift", "vanished", "modified"):
        first = next(f for f in ps.files if f.status == ps.status)
        raise CoreError(ps.status, patch.id, _describe(ps, tree), file=first.rel or first.module,
                        problems=first.problems)
    result = {"id": patch.id, "marker": patch.marker, "vllm_version": tree.version, "action": "applied",
              "files": [{"rel": f.rel, "module": f.module, "status": f.status} for f in ps.files]}
    if not patched:
        result["action"] = "already-applied" if ps.status == "applied" else "present"
        if ps.record:
            result["files"] = ps.record.get("files", result["files"])
        return result
    why = tree.unwritable([*patched, record_rel(patch.id), *(original_rel(patch.id, r) for r in patched)])
    if why:
        raise CoreError("readonly", patch.id, f"patch {patch.id}: cannot write {tree.label}: {why}")
    rec_files = [
        {"rel": rel, "module": next(f.module for f in ps.files if f.rel == rel),
         "original_sha256": sha256(originals[rel]), "patched_sha256": sha256(patched[rel])}
        for rel in patched
    ]
    record = {"format": RECORD_FORMAT, "id": patch.id, "marker": patch.marker, "vllm_version": tree.version,
              "files": rec_files}
    result["files"] = rec_files
    if dry_run:
        result["action"] = "would-apply"
        return result
    keep = {original_rel(patch.id, rel): data for rel, data in originals.items()}
    keep[record_rel(patch.id)] = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    tree.write(keep)
    try:
        tree.write(patched)
        failures = _verify_files(tree, patch)
        if failures:
            raise CoreError("verify", patch.id, f"patch {patch.id} applied but verification failed: "
                            + "; ".join(failures))
    except BaseException:
        tree.write({rel: originals[rel] for rel in patched})
        tree.delete(list(keep))
        raise
    return result


def _verify_files(tree: Any, patch: PatchDef) -> list[str]:
    failures: list[str] = []
    for fs in patch.files:
        hit = _resolve(tree, fs)
        if hit is None:
            failures.append(f"{fs.modules[0]}: target vanished")
            continue
        _module, rel, data = hit
        failures.extend(f"{rel}: {p}" for p in check_text(data.decode("utf-8", "replace"), fs.verify))
    return failures


def verify(tree: Any, patch: PatchDef) -> list[str]:
    """Failures of the patch's checks on the tree as it is now (empty = behaviour present)."""
    return _verify_files(tree, patch)


def revert(tree: Any, patch: PatchDef, *, dry_run: bool = False) -> dict[str, Any]:
    """Restore the kept originals byte for byte; refuses if a file changed since forklift patched it."""
    rec = load_record(tree, patch.id)
    if rec is None:
        ps = status(tree, patch)
        if ps.status == "present":
            raise CoreError("unmanaged", patch.id, f"patch {patch.id}: the patched behaviour is present in "
                            f"{tree.label} but forklift did not apply it there; nothing kept to revert to")
        return {"id": patch.id, "action": "not-applied", "files": []}
    restore: dict[str, bytes] = {}
    for f in rec.get("files", []):
        rel = f["rel"]
        cur = tree.read(rel)
        cur_sha = sha256(cur) if cur is not None else None
        if cur_sha == f["original_sha256"]:
            continue
        if cur_sha != f["patched_sha256"]:
            raise CoreError("modified", patch.id, f"patch {patch.id}: {rel} changed since forklift patched it "
                            f"(sha256 {str(cur_sha)[:12]}, expected {f['patched_sha256'][:12]}); not reverting. "
                            "If another patch was applied to it later, revert that one first", file=rel)
        orig = tree.read(original_rel(patch.id, rel))
        if orig is None or sha256(orig) != f["original_sha256"]:
            raise CoreError("modified", patch.id, f"patch {patch.id}: the kept original of {rel} is missing or "
                            "damaged; reinstall vLLM to restore it", file=rel)
        restore[rel] = orig
    result = {"id": patch.id, "action": "reverted", "files": rec.get("files", [])}
    if dry_run:
        result["action"] = "would-revert"
        return result
    if restore:
        why = tree.unwritable(list(restore))
        if why:
            raise CoreError("readonly", patch.id, f"patch {patch.id}: cannot write {tree.label}: {why}")
        tree.write(restore)
    for f in rec.get("files", []):
        data = tree.read(f["rel"])
        if data is None or sha256(data) != f["original_sha256"]:
            raise CoreError("modified", patch.id, f"patch {patch.id}: {f['rel']} is not byte-identical after revert")
    tree.delete([record_rel(patch.id), *(original_rel(patch.id, f["rel"]) for f in rec.get("files", []))])
    return result


# ---------------------------------------------------------------------------------------------------
# Program mode: `python -c <source> OP ...` on a node or in a container. Prints JSON, never raises.


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _program(argv: list[str]) -> int:  # pragma: no cover - exercised through subprocesses
    op = argv[0] if argv else ""
    out: Any
    if op == "locate":
        out = locate_vllm()
    elif op == "read":
        tree = DirTree(argv[1], version="")
        out = {rel: _b64(tree.read(rel)) for rel in argv[2:]}
    elif op == "unwritable":
        out = {"reason": DirTree(argv[1], version="").unwritable(argv[2:])}
    elif op == "write":
        files = json.loads(sys.stdin.read())
        DirTree(argv[1], version="").write({k: base64.b64decode(v) for k, v in files.items()})
        out = {"written": sorted(files)}
    elif op == "delete":
        DirTree(argv[1], version="").delete(argv[2:])
        out = {"deleted": argv[2:]}
    elif op == "entry":
        return _entry(json.loads(argv[1]))
    else:
        sys.stderr.write(f"unknown op {op!r}\n")
        return 2
    sys.stdout.write(json.dumps(out))
    return 0


def _entry(spec: dict[str, Any]) -> int:  # pragma: no cover - exercised through the rendered script
    """Container start (the rendered entrypoint script): apply and verify, or stop before vLLM loads."""
    return container_apply(spec, sys.stderr)


# ---------------------------------------------------------------------------------------------------
# Container start: forklift's launcher (engine/vllm_main.py) calls this before vLLM is imported

SPEC_FORMAT = 1
ERROR_PREFIX = "[forklift-patch] ERROR"
_VERBS = {"applied": "applied to", "already-applied": "already applied to", "present": "present in"}


def spec_entries(spec: dict[str, Any]) -> list[tuple[PatchDef, bool, str | None]]:
    """(patch, ignore_version, because) per patch of a container spec.

    ``{"format": 1, "patches": [{"patch": {...}, "ignore_version": bool, "because": str|None}]}``; the older
    ``{"ignore_version": bool, "patches": [{...PatchDef...}]}`` is read too.
    """
    if "format" not in spec:
        return [(PatchDef.from_json(p), bool(spec.get("ignore_version")), None) for p in spec["patches"]]
    return [(PatchDef.from_json(e["patch"]), bool(e.get("ignore_version")), e.get("because"))
            for e in spec["patches"]]


def marker_lines(tree: Any, patch: PatchDef, result: dict[str, Any]) -> list[str]:
    """One log line per file: ``[forklift-patch ID] applied to vllm/FILE (sha256 HEX) on vLLM X``."""
    base = os.path.basename(getattr(tree, "root", "vllm").rstrip(os.sep)) or "vllm"
    out = []
    for f in result["files"]:
        data = tree.read(f["rel"])
        digest = sha256(data) if data is not None else "missing"
        verb = _VERBS.get(str(result["action"]), str(result["action"]))
        out.append(f"{patch.marker} {verb} {base}/{f['rel']} (sha256 {digest}) on vLLM {tree.version}")
    return out


def apply_entries(tree: Any, entries: list[tuple[PatchDef, bool, str | None]], emit: Any) -> None:
    """Apply and verify each patch in order, calling ``emit(line)`` for each line that proves it (as soon as
    that patch is done). Raises CoreError."""
    for patch, ignore_version, because in entries:
        if ignore_version and version_in_range(tree.version, patch.vllm) is not True:
            emit(f"{patch.marker} vLLM {tree.version} is outside vllm{patch.vllm}; applied anyway "
                 f"(any_version: {because or 'set by the caller'})")
        res = apply(tree, patch, ignore_version=ignore_version)
        failures = verify(tree, patch)
        if failures:
            raise CoreError("verify", patch.id, f"patch {patch.id}: applied but not verified: " + "; ".join(failures))
        for line in marker_lines(tree, patch, res):
            emit(line)


def container_apply(spec: dict[str, Any], out: Any) -> int:
    """Apply the spec's patches to the vLLM this Python would import, writing one line per file to ``out``.

    Returns 0, or 3 after an ``[forklift-patch] ERROR`` line (the caller must then not start vLLM).
    """
    loc = locate_vllm()
    if loc["root"] is None:
        out.write(f"{ERROR_PREFIX} (missing): vllm is not importable by {sys.executable}; vLLM was not started\n")
        return 3
    tree = DirTree(loc["root"], loc["version"])

    def emit(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    try:
        apply_entries(tree, spec_entries(spec), emit)
    except CoreError as exc:
        out.write(f"{ERROR_PREFIX} ({exc.kind}): {exc}\n")
        out.write(f"{ERROR_PREFIX} vLLM was not started: `forklift patch check --against vllm==VERSION` shows "
                  "which patches fit a release; drop or fix the patch in the recipe\n")
        return 3
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out.write(f"{ERROR_PREFIX} (spec): {type(exc).__name__}: {exc}; vLLM was not started\n")
        return 3
    return 0


def container_apply_file(path: str, out: Any) -> int:
    """``container_apply`` for the JSON file forklift mounted into the container."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError) as exc:
        out.write(f"{ERROR_PREFIX} (spec): cannot read {path}: {exc}; vLLM was not started\n")
        return 3
    return container_apply(spec, out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_program(sys.argv[1:]))
