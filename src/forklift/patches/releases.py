"""vLLM releases' files for ``forklift patch check --against vllm==X``: fetched once, cached, read lazily.

The smallest distribution of a release is chosen from the package index (the sdist: tens of MB, where
a wheel is hundreds), checked against the index's sha256 and kept under
``$FORKLIFT_CACHE/vllm-releases/``. Only the target files are ever read out of the archive.

Why not ``pip download --no-deps --no-binary :all:``: pip builds an sdist's metadata before saving it,
and vLLM's build backend needs setuptools-scm and a pinned torch (gigabytes) to do that, so pip fails
and deletes the file. The index's JSON API (PEP 691) is the same source pip reads.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from forklift import paths
from forklift.errors import PatchError

if TYPE_CHECKING:
    import httpx

DEFAULT_INDEX = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
MAX_ARCHIVE_BYTES = 200 * 1024 * 1024  # refuse to fetch a wheel (~300 MB) by accident


def releases_dir() -> Path:
    return paths.cache_dir() / "vllm-releases"


@dataclass(frozen=True)
class ReleaseFile:
    """One distribution file of a release, as the index lists it."""

    filename: str
    url: str
    size: int | None
    sha256: str | None


def parse_requirement(text: str) -> str:
    """'vllm==0.26.0' or '0.26.0' -> '0.26.0'; anything else is a clear error."""
    m = re.fullmatch(r"\s*(?:vllm\s*==\s*)?([0-9][0-9A-Za-z.+\-]*)\s*", text)
    if m is None:
        raise PatchError(f"--against {text!r}: expected vllm==VERSION", fix="Use e.g. --against vllm==0.26.0")
    try:
        Version(m.group(1))
    except InvalidVersion as exc:
        raise PatchError(f"--against {text!r}: {m.group(1)!r} is not a version",
                         fix="Use e.g. --against vllm==0.26.0") from exc
    return m.group(1)


def list_release_files(version: str, *, index_url: str = DEFAULT_INDEX,
                       client: httpx.Client | None = None) -> list[ReleaseFile]:
    """The files of vllm==version on the index, smallest first."""
    import httpx  # noqa: PLC0415 - only `patch check --against` talks to the index; plan must not pay for httpx

    url = f"{index_url.rstrip('/')}/vllm/"
    try:
        if client is None:
            with httpx.Client(timeout=60, follow_redirects=True) as c:
                resp = c.get(url, headers={"Accept": SIMPLE_JSON})
        else:
            resp = client.get(url, headers={"Accept": SIMPLE_JSON})
        resp.raise_for_status()
        data = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise PatchError(f"cannot list vLLM releases at {url}: {exc}",
                         fix="Check network access to the package index, or pre-fetch the release.") from exc
    files = []
    for f in data.get("files", []):
        name = str(f.get("filename", ""))
        if _file_version(name) != version:
            continue
        files.append(ReleaseFile(name, str(f["url"]), f.get("size"), (f.get("hashes") or {}).get("sha256")))
    return sorted(files, key=lambda f: (not f.filename.endswith(".tar.gz"), f.size or 0))


def _file_version(filename: str) -> str | None:
    m = re.match(r"vllm-([^-]+?)(?:\.tar\.gz|\.zip|-.*\.whl)$", filename)
    return m.group(1) if m else None


def cached_archive(version: str) -> Path | None:
    """The cached archive of a release, if it was fetched before."""
    d = releases_dir()
    for pattern in (f"vllm-{version}.tar.gz", f"vllm-{version}-*.whl"):
        hits = sorted(d.glob(pattern))
        if hits:
            return hits[0]
    return None


def fetch(version: str, *, index_url: str = DEFAULT_INDEX, max_bytes: int = MAX_ARCHIVE_BYTES,
          client: httpx.Client | None = None) -> Path:
    """The archive of vllm==version, from the cache or downloaded into it (sha256-checked)."""
    hit = cached_archive(version)
    if hit is not None:
        return hit
    files = list_release_files(version, index_url=index_url, client=client)
    if not files:
        raise PatchError(f"vllm=={version} is not on {index_url}",
                         fix="Pick a released version (pip index versions vllm).")
    choice = files[0]
    if choice.size is not None and choice.size > max_bytes:
        raise PatchError(
            f"vllm=={version}: smallest file {choice.filename} is {choice.size / 1e6:.0f} MB "
            f"(limit {max_bytes / 1e6:.0f} MB)",
            fix="Download it yourself into " + str(releases_dir()) + " if you really want it checked.",
        )
    import httpx  # noqa: PLC0415 - see list_release_files

    dest = releases_dir() / choice.filename
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    try:
        with (httpx.Client(timeout=300, follow_redirects=True) if client is None else _nullcontext(client)) as c, \
                c.stream("GET", choice.url) as resp:
            resp.raise_for_status()
            with open(part, "wb") as out:
                for chunk in resp.iter_bytes(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
    except httpx.HTTPError as exc:
        part.unlink(missing_ok=True)
        raise PatchError(f"downloading {choice.url} failed: {exc}", fix="Retry; check network access.") from exc
    if choice.sha256 and digest.hexdigest() != choice.sha256:
        part.unlink(missing_ok=True)
        raise PatchError(f"{choice.filename}: sha256 mismatch (index says {choice.sha256})",
                         fix="Retry the download; if it persists, the index or a proxy is serving a bad file.")
    os.replace(part, dest)
    return dest


class _nullcontext:
    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def __enter__(self) -> httpx.Client:
        return self.client

    def __exit__(self, *exc: object) -> None:
        return None


class ReleaseArchive:
    """Read-only access to ``vllm/...`` files inside an sdist or wheel, by path relative to ``vllm/``.

    Reading is one pass over the archive that keeps only the requested files (``prefetch``).
    """

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self._files: dict[str, bytes] = {}
        self._scanned: set[str] = set()

    @staticmethod
    def _rel(member: str) -> str | None:
        parts = PurePosixPath(member).parts
        if len(parts) >= 2 and parts[0] == "vllm":  # wheel
            return "/".join(parts[1:])
        if len(parts) >= 3 and parts[1] == "vllm" and parts[0].startswith("vllm-"):  # sdist
            return "/".join(parts[2:])
        return None

    def prefetch(self, rels: list[str]) -> None:
        wanted = set(rels) - self._scanned
        if not wanted:
            return
        try:
            if self.archive.name.endswith((".whl", ".zip")):
                with zipfile.ZipFile(self.archive) as z:
                    for name in z.namelist():
                        rel = self._rel(name)
                        if rel in wanted:
                            self._files[rel] = z.read(name)
            else:
                with tarfile.open(self.archive, "r:*") as t:
                    for member in t:
                        rel = self._rel(member.name)
                        if rel in wanted and member.isfile():
                            f = t.extractfile(member)
                            if f is not None:
                                self._files[rel] = f.read()
        except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
            raise PatchError(f"{self.archive}: cannot read the archive: {exc}",
                             fix=f"Delete {self.archive} and run the check again to fetch it anew.") from exc
        self._scanned |= wanted

    def read(self, rel: str) -> bytes | None:
        self.prefetch([rel])
        return self._files.get(rel)


def extract_files(archive: Path, rels: list[str], dest: Path,
                  keep: Callable[[str], bool] | None = None) -> list[str]:
    """Copy the named ``vllm/`` files out of an archive into ``dest/vllm/`` (for tests); returns those found."""
    ra = ReleaseArchive(archive)
    ra.prefetch(rels)
    found = []
    for rel in rels:
        data = ra.read(rel)
        if data is None or (keep is not None and not keep(rel)):
            continue
        out = dest / "vllm" / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        found.append(rel)
    return found
