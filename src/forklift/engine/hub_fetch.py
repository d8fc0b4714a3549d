"""Download files of one Hugging Face Hub commit onto this host, verify each, and report progress.

Shipped to a node and run by the node's own Python (``python hub_fetch.py SPEC.json``); it imports nothing
from forklift, only ``huggingface_hub`` (which every vLLM install has). Progress goes to stdout as JSON
lines (``start``, ``progress``, ``file``, then ``done`` or ``error``); the token is read by huggingface_hub
from ``HF_TOKEN`` in the environment and never written anywhere.

Where the files go (``spec["dest"]``):
- ``{"kind": "dir", "path": P}``: P/<file>, as a model directory (``model.path`` / a node's ``model_path``).
- ``{"kind": "cache", "path": HUB_CACHE}``: Hugging Face's cache layout (``models--org--name/blobs/<etag>``,
  ``snapshots/<commit>/<file>`` linking to it, ``refs/<revision>``), where vLLM finds a hub id offline.

Resume: a file is fetched with huggingface_hub's own ``http_get`` into a partial file named after its etag and
continued with a Range request where a killed run left it (huggingface_hub 2.x's ``hf_hub_download`` keeps no
partial file between processes). Files the Hub serves through Xet go through ``hf_hub_download`` when
``hf_xet`` is installed (and resume as far as hf_xet does). Verification: size, then the LFS sha256 (or, for
small non-LFS files, the git blob id) against the listing forklift read from the Hub; a verified file is
remembered by size and mtime, so a re-run does not hash it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
_print_lock = threading.Lock()
HASH_CHUNK = 8 << 20
CHUNK = 1 << 20


def emit(event: str, **fields: Any) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n")
        sys.stdout.flush()


def file_digest(path: Path, *, git_blob: bool) -> str:
    """sha256 of the content, or git's blob id (sha1 over ``blob <size>\\0`` + content) for non-LFS files."""
    h = hashlib.sha1() if git_blob else hashlib.sha256()  # noqa: S324 - git's object id, not a security hash
    if git_blob:
        h.update(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(HASH_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


class FetchError(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class Counting:
    """The file object ``http_get`` writes to: counts bytes for progress."""

    def __init__(self, fh: Any, on_size: Callable[[int], None]) -> None:
        self.fh, self.on_size = fh, on_size

    def write(self, data: bytes) -> int:
        n: int = self.fh.write(data)
        self.on_size(self.fh.tell())
        return n

    def tell(self) -> int:
        return int(self.fh.tell())

    def seek(self, *args: Any) -> int:
        return int(self.fh.seek(*args))

    def truncate(self, *args: Any) -> int:
        out = int(self.fh.truncate(*args))
        self.on_size(self.fh.tell())
        return out

    def flush(self) -> None:
        self.fh.flush()


class Fetcher:
    """One spec: where files go, what is done, what is in flight."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.repo, self.commit = str(spec["repo"]), str(spec["commit"])
        self.revision = str(spec.get("revision") or spec["commit"])
        self.endpoint = spec.get("endpoint")
        self.kind = spec["dest"]["kind"]
        root = Path(os.path.expanduser(spec["dest"]["path"]))
        self.storage = root / ("models--" + self.repo.replace("/", "--")) if self.kind == "cache" else root
        self.meta_dir = self.storage / ".forklift"
        self.files: list[dict[str, Any]] = list(spec["files"])
        self.total = sum(int(f["size"]) for f in self.files)
        self.done = 0
        self.inflight: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.verified = self._load_verified()

    # where things are
    def final_path(self, f: dict[str, Any]) -> Path:
        if self.kind == "cache":
            return self.storage / "snapshots" / self.commit / str(f["name"])
        return self.storage / str(f["name"])

    def expected(self, f: dict[str, Any]) -> tuple[str, bool]:
        """(digest, is git blob id)."""
        return (str(f["sha256"]), False) if f.get("sha256") else (str(f["blob_id"]), True)

    def partial_path(self, f: dict[str, Any]) -> Path:
        digest = self.expected(f)[0]
        if self.kind == "cache":
            return self.storage / "blobs" / f"{digest}.forklift-partial"
        return self.meta_dir / "partial" / f"{f['name'].replace('/', '%2F')}.{digest[:16]}"

    # verified memory: name -> [size, mtime_ns, digest]
    def _load_verified(self) -> dict[str, list[Any]]:
        try:
            data = json.loads((self.meta_dir / "verified.json").read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _remember(self, f: dict[str, Any], path: Path) -> None:
        st = path.stat()
        with self.lock:
            self.verified[f["name"]] = [st.st_size, st.st_mtime_ns, self.expected(f)[0]]
            self.meta_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.meta_dir / f"verified.json.{os.getpid()}"
            tmp.write_text(json.dumps(self.verified, indent=1, sort_keys=True))
            os.replace(tmp, self.meta_dir / "verified.json")

    def is_good(self, f: dict[str, Any], path: Path) -> bool:
        """path holds f's content: same size, and the digest matches (from memory when size and mtime match)."""
        try:
            st = path.stat()
        except OSError:
            return False
        if st.st_size != int(f["size"]):
            return False
        digest, git_blob = self.expected(f)
        if self.verified.get(f["name"]) == [st.st_size, st.st_mtime_ns, digest]:
            return True
        if file_digest(path, git_blob=git_blob) != digest:
            return False
        self._remember(f, path)
        return True

    def progress(self) -> None:
        with self.lock:
            done = self.done + sum(self.inflight.values())
        emit("progress", done=done, total=self.total)

    def finished(self, f: dict[str, Any], status: str, moved: int) -> None:
        with self.lock:
            self.inflight.pop(f["name"], None)
            self.done += int(f["size"])
        emit("file", name=f["name"], status=status, bytes=moved)


def _hub() -> Any:
    import huggingface_hub

    constants = getattr(huggingface_hub, "constants", None)
    if constants is not None and getattr(constants, "DOWNLOAD_CHUNK_SIZE", 0) > CHUNK:
        constants.DOWNLOAD_CHUNK_SIZE = CHUNK  # http_get reads it per call: progress and resume every MiB, not 10
    return huggingface_hub


def _xet_available() -> bool:
    try:
        from huggingface_hub.utils import is_xet_available
    except ImportError:
        return False
    return bool(is_xet_available())


def _metadata(fx: Fetcher, f: dict[str, Any]) -> Any:
    hub = _hub()
    url = hub.hf_hub_url(fx.repo, f["name"], revision=fx.commit, endpoint=fx.endpoint)
    meta = hub.get_hf_file_metadata(url)
    if meta.commit_hash and meta.commit_hash != fx.commit:
        raise FetchError(f["name"], f"the Hub answered commit {meta.commit_hash} for {fx.commit}")
    if meta.size is not None and int(meta.size) != int(f["size"]):
        raise FetchError(f["name"], f"the Hub says {meta.size} bytes, the listing said {f['size']}")
    return meta


def _place(fx: Fetcher, f: dict[str, Any], src: Path) -> Path:
    """Move a verified download where it belongs (and link it into the snapshot for the cache layout)."""
    final = fx.final_path(f)
    final.parent.mkdir(parents=True, exist_ok=True)
    if fx.kind == "dir":
        os.replace(src, final)
        return final
    blob = fx.storage / "blobs" / fx.expected(f)[0]
    os.replace(src, blob)
    if final.is_symlink() or final.exists():
        final.unlink()
    final.symlink_to(os.path.relpath(blob, final.parent))
    return final


def _fetch_http(fx: Fetcher, f: dict[str, Any], meta: Any) -> tuple[str, int]:
    """http_get into the partial file, resuming where it stopped; verify; place. Returns (status, bytes moved)."""
    import importlib

    http_get = importlib.import_module("huggingface_hub.file_download").http_get
    build_hf_headers = importlib.import_module("huggingface_hub.utils").build_hf_headers
    part = fx.partial_path(f)
    part.parent.mkdir(parents=True, exist_ok=True)
    size = int(f["size"])
    have = part.stat().st_size if part.exists() else 0
    if have > size:
        part.unlink()
        have = 0
    name = f["name"]

    def seen(n: int) -> None:
        with fx.lock:
            fx.inflight[name] = n

    seen(have)
    with part.open("ab") as fh:
        http_get(meta.location, Counting(fh, seen), resume_size=have, headers=build_hf_headers(),
                 expected_size=size)
    digest, git_blob = fx.expected(f)
    got = file_digest(part, git_blob=git_blob)
    if part.stat().st_size != size or got != digest:
        part.unlink()
        raise FetchError(name, f"{'git blob id' if git_blob else 'sha256'} mismatch: the Hub lists {digest}, "
                               f"the download has {got} ({part.stat().st_size if part.exists() else 'removed'}); "
                               "the partial file was removed")
    fx._remember(f, _place(fx, f, part))
    return ("resumed" if have else "downloaded"), size - have


def _fetch_xet(fx: Fetcher, f: dict[str, Any]) -> tuple[str, int]:
    hub = _hub()
    where = {"cache_dir": str(fx.storage.parent)} if fx.kind == "cache" else {"local_dir": str(fx.storage)}
    path = Path(hub.hf_hub_download(fx.repo, f["name"], revision=fx.commit, endpoint=fx.endpoint, **where))
    if not fx.is_good(f, path):
        path.unlink()
        raise FetchError(f["name"], "the Xet download does not match the Hub's size/sha256; it was removed")
    return "downloaded", int(f["size"])


def fetch_one(fx: Fetcher, f: dict[str, Any]) -> None:
    if fx.stop.is_set():
        return
    final = fx.final_path(f)
    if fx.is_good(f, final):
        fx.finished(f, "present", 0)
        return
    if final.is_symlink() or final.exists():
        final.unlink()  # wrong size or content: fetched again
    meta = _metadata(fx, f)
    use_xet = getattr(meta, "xet_file_data", None) is not None and _xet_available()
    status, moved = _fetch_xet(fx, f) if use_xet else _fetch_http(fx, f, meta)
    fx.finished(f, status, moved)


def _write_pins(fx: Fetcher) -> None:
    """Cache layout: ``refs/<revision>`` (how huggingface_hub finds a branch's commit offline). Directory layout:
    ``.forklift/source.json`` (what forklift pins in the run record)."""
    if fx.kind == "cache":
        if fx.revision != fx.commit:
            ref = fx.storage / "refs" / fx.revision
            ref.parent.mkdir(parents=True, exist_ok=True)
            ref.write_text(fx.commit)
        return
    fx.meta_dir.mkdir(parents=True, exist_ok=True)
    pin = {"repo": fx.repo, "revision": fx.revision, "commit": fx.commit, "endpoint": fx.endpoint}
    (fx.meta_dir / "source.json").write_text(json.dumps(pin, indent=1) + "\n")


def run(spec: dict[str, Any]) -> int:
    fx = Fetcher(spec)
    hub = _hub()
    emit("start", hub_version=getattr(hub, "__version__", "?"), xet=_xet_available(), files=len(fx.files),
         total=fx.total, dest=str(fx.storage))
    ticker_stop = threading.Event()

    def tick() -> None:
        while not ticker_stop.wait(0.5):
            fx.progress()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    errors: list[tuple[str, str]] = []

    def guarded(f: dict[str, Any]) -> None:
        try:
            fetch_one(fx, f)
        except Exception as exc:  # noqa: BLE001 - every failure is reported as an event, with its file
            fx.stop.set()
            errors.append((getattr(exc, "name", f["name"]), f"{type(exc).__name__}: {str(exc)[:600]}"))

    with ThreadPoolExecutor(max_workers=max(1, int(spec.get("workers", 4)))) as pool:
        list(pool.map(guarded, fx.files))
    ticker_stop.set()
    fx.progress()
    if errors:
        emit("error", file=errors[0][0], message=errors[0][1], errors=len(errors))
        return 1
    _write_pins(fx)
    emit("done", files=len(fx.files), total=fx.total, dest=str(fx.storage), commit=fx.commit)
    return 0


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    try:
        code = run(spec)
    except Exception as exc:  # noqa: BLE001 - reported as the last event
        emit("error", file=None, message=f"{type(exc).__name__}: {str(exc)[:600]}")
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
