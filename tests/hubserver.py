"""A small local server speaking the part of the Hugging Face Hub's file API that ``huggingface_hub`` uses to
list and download a model, so pulls can be tested without the internet (Hugging Face is not reachable here).

It is deliberately small, and is not the Hub: one or more model repos served from folders, one commit each.
What it speaks is what huggingface_hub 2.4.0 reads (huggingface_hub/hf_api.py ``model_info`` and
``ModelInfo``/``RepoSibling``/``BlobLfsInfo``; file_download.py ``get_hf_file_metadata``, ``http_get``):

- ``GET /api/models/{repo}[/revision/{rev}]?blobs=true``: ``{"id", "sha": commit, "siblings": [{"rfilename",
  "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}]}``.
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``: a non-LFS file is answered directly with ``ETag`` (its git blob
  id) and ``X-Repo-Commit``; an LFS file (``*.safetensors``) redirects (302, absolute ``Location`` on a second
  port, another origin, like the Hub's CDN redirect) with ``X-Linked-Etag`` (the LFS sha256), ``X-Linked-Size``
  and ``X-Repo-Commit``.
- ``GET /cdn/{sha256}``: the LFS object, with ``Range: bytes=N-`` answered 206 + ``Content-Range`` (resume).
- Errors carry ``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound) as the Hub's do; with a token
  configured, ``/api`` and ``/resolve`` answer 401 without ``Authorization: Bearer TOKEN``.
No Xet: tests set ``HF_HUB_DISABLE_XET=1`` and the server never sends ``X-Xet-*`` headers.

Test knobs: ``rate`` (bytes/s per LFS response, so a transfer can be killed half way), ``corrupt`` (file names
served with one byte flipped while the listing keeps the true sha256), and a request log (``requests`` or a JSONL
file) with the method, path, Range, client address and whether a token came along (never the token itself).

Run in a namespace: ``HUBSERVER_TOKEN=T python -m tests.hubserver --bind IP --port P --repo org/name=DIR``; it prints
``ready COMMIT`` per repo once listening.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

CHUNK = 64 * 1024


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's object id


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class RepoFile:
    name: str
    path: Path
    size: int
    sha256: str
    blob_id: str
    lfs: bool
    pointer_size: int = 0


@dataclass
class Repo:
    repo_id: str
    folder: Path
    files: dict[str, RepoFile] = field(default_factory=dict)
    commit: str = ""

    @classmethod
    def load(cls, repo_id: str, folder: Path) -> Repo:
        repo = cls(repo_id, folder)
        for p in sorted(folder.rglob("*")):
            if not p.is_file():
                continue
            data = p.read_bytes()
            name = p.relative_to(folder).as_posix()
            sha = hashlib.sha256(data).hexdigest()
            if name.endswith(".safetensors"):
                pointer = lfs_pointer(sha, len(data))
                repo.files[name] = RepoFile(name, p, len(data), sha, git_blob_id(pointer), True, len(pointer))
            else:
                repo.files[name] = RepoFile(name, p, len(data), sha, git_blob_id(data), False)
        digest = hashlib.sha1(repo_id.encode())  # noqa: S324 - a stand-in commit id, stable for the content
        for f in repo.files.values():
            digest.update(f"{f.name}\0{f.sha256}\n".encode())
        repo.commit = digest.hexdigest()
        return repo

    def sibling(self, f: RepoFile) -> dict[str, Any]:
        out: dict[str, Any] = {"rfilename": f.name, "size": f.size, "blobId": f.blob_id}
        if f.lfs:
            out["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        return out


class HubServer:
    """The server; ``start()`` in a thread of this process (unit tests) or run ``main`` in a namespace."""

    def __init__(self, repos: dict[str, Path], *, bind: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 rate: float | None = None, corrupt: set[str] | None = None, log: Path | None = None) -> None:
        self.repos = {rid: Repo.load(rid, folder) for rid, folder in repos.items()}
        self.token = token
        self.rate = rate
        self.corrupt = set(corrupt or ())
        self.log_path = log
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((bind, port), _handler(self))
        self.cdn = ThreadingHTTPServer((bind, 0), _handler(self))  # another origin: huggingface_hub stops there
        for httpd in (self.httpd, self.cdn):
            httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server: (host, port)
        return f"http://{host}:{port}"

    @property
    def cdn_url(self) -> str:
        host, port = self.cdn.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server: (host, port)
        return f"http://{host}:{port}"

    def start(self) -> HubServer:
        for httpd in (self.httpd, self.cdn):
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return self

    def serve_forever(self) -> None:
        threading.Thread(target=self.cdn.serve_forever, daemon=True).start()
        self.httpd.serve_forever()

    def stop(self) -> None:
        for httpd in (self.httpd, self.cdn):
            httpd.shutdown()
            httpd.server_close()

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.log_path is not None:
                with self.log_path.open("a") as fh:
                    fh.write(json.dumps(entry) + "\n")

    def content(self, f: RepoFile) -> bytes:
        data = f.path.read_bytes()
        if f.name in self.corrupt and data:
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
        return data


def _handler(server: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            return

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
            self._route(head=True)

        def do_GET(self) -> None:  # noqa: N802
            self._route(head=False)

        def _route(self, head: bool) -> None:
            path = unquote(urlparse(self.path).path)
            authed = self.headers.get("Authorization", "") == f"Bearer {server.token}" if server.token else None
            server.record({"method": self.command, "path": path, "range": self.headers.get("Range"),
                           "auth": self.headers.get("Authorization") is not None, "client": self.client_address[0],
                           "t": time.time()})
            if path.startswith("/cdn/"):
                self._cdn(path[len("/cdn/"):], head)
                return
            if authed is False:
                self._error(401, "Invalid credentials in Authorization header", "")
                return
            if path.startswith("/api/models/"):
                self._info(path[len("/api/models/"):])
            elif "/resolve/" in path:
                self._resolve(path, head)
            else:
                self._error(404, "not found", "")

        def _error(self, code: int, message: str, error_code: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(code)
            if error_code:
                self.send_header("X-Error-Code", error_code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _repo(self, repo_id: str, rev: str) -> Repo | None:
            repo = server.repos.get(repo_id)
            if repo is None:
                self._error(404, f"Repository {repo_id} not found", "RepoNotFound")
                return None
            if rev not in ("main", repo.commit):
                self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
                return None
            return repo

        def _info(self, rest: str) -> None:
            repo_id, _, rev = rest.partition("/revision/")
            repo = self._repo(repo_id, rev or "main")
            if repo is None:
                return
            body = json.dumps({"_id": repo.commit[:24], "id": repo_id, "modelId": repo_id, "sha": repo.commit,
                               "private": False, "disabled": False, "gated": False, "tags": [],
                               "siblings": [repo.sibling(f) for f in repo.files.values()]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _resolve(self, path: str, head: bool) -> None:
            repo_part, _, rest = path.lstrip("/").partition("/resolve/")
            rev, _, name = rest.partition("/")
            repo = self._repo(repo_part, rev)
            if repo is None:
                return
            f = repo.files.get(name)
            if f is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if f.lfs:
                self.send_response(302)
                self.send_header("Location", f"{server.cdn_url}/cdn/{f.sha256}")
                self.send_header("ETag", f'"{f.blob_id}"')
                self.send_header("X-Linked-Etag", f'"{f.sha256}"')
                self.send_header("X-Linked-Size", str(f.size))
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = server.content(f)
            self.send_response(200)
            self.send_header("ETag", f'"{f.blob_id}"')
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def _cdn(self, sha: str, head: bool) -> None:
            f = next((f for r in server.repos.values() for f in r.files.values() if f.sha256 == sha), None)
            if f is None:
                self._error(404, "no such object", "")
                return
            data = server.content(f)
            start = 0
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                start = int(rng[6:].split("-")[0])
            self.send_response(206 if start else 200)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{sha}"')
            self.send_header("Content-Length", str(len(data) - start))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if not head:
                self._send(data[start:])

        def _send(self, data: bytes) -> None:
            t0 = time.monotonic()
            for off in range(0, len(data), CHUNK):
                try:
                    self.wfile.write(data[off:off + CHUNK])
                except (BrokenPipeError, ConnectionResetError):
                    return
                if server.rate:
                    lag = (off + CHUNK) / server.rate - (time.monotonic() - t0)
                    if lag > 0:
                        time.sleep(lag)

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--repo", action="append", default=[], help="ORG/NAME=FOLDER")
    ap.add_argument("--token", default=os.environ.get("HUBSERVER_TOKEN"), help="default: $HUBSERVER_TOKEN (keeps it "
                    "out of argv, where tests look for leaks)")
    ap.add_argument("--rate", type=float)
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--log", type=Path)
    args = ap.parse_args()
    repos = {spec.split("=", 1)[0]: Path(spec.split("=", 1)[1]) for spec in args.repo}
    srv = HubServer(repos, bind=args.bind, port=args.port, token=args.token, rate=args.rate,
                    corrupt=set(args.corrupt), log=args.log)
    for repo in srv.repos.values():
        print(f"ready {repo.repo_id} {repo.commit} {srv.url}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
