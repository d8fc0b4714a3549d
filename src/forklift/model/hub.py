"""The Hugging Face Hub as forklift reads it: one repo at one commit (every file with its size and hash), the
token, and the two small files a node's shard selection needs.

Only metadata and config.json / the safetensors index are fetched on this machine, into forklift's own cache
(``$FORKLIFT_CACHE/hub``, never the Hugging Face cache vLLM reads). Weights are downloaded by each node's own
Python (``forklift.engine.hub_fetch``), which ``forklift.distribution.pull`` starts. ``HF_ENDPOINT`` points all of it
at a mirror (or a test server). The token is HF_TOKEN or the hub login's; it is never logged or stored.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forklift import paths
from forklift.errors import HubError, HubIdError

COMMIT_RE = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HubFile:
    """One file of a commit: its size and the hash the Hub lists for it."""

    name: str
    size: int
    sha256: str | None
    """LFS files (weights): the sha256 of the content."""
    blob_id: str | None
    """Small files kept in git: the git blob id (sha1 over ``blob <size>\\0`` + content)."""

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "blob_id": self.blob_id}


@dataclass(frozen=True)
class HubSnapshot:
    """A repo at one commit, as the Hub lists it."""

    repo: str
    revision: str
    """What was asked for (a branch, tag or commit)."""
    commit: str
    files: tuple[HubFile, ...]

    @property
    def sizes(self) -> dict[str, int]:
        return {f.name: f.size for f in self.files}

    def by_name(self) -> dict[str, HubFile]:
        return {f.name: f for f in self.files}


def parse_ref(ref: str) -> tuple[str, str | None]:
    """``org/name[@revision]`` -> (repo id, revision or None)."""
    repo, _, rev = ref.partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")) or repo.startswith((".", "/", "~")):
        raise HubIdError(f"'{ref}' is not a Hugging Face id", fix="Use ORG/NAME or ORG/NAME@REVISION, e.g. "
                       "zai-org/GLM-4.7@main.")
    return repo, rev or None


def token() -> str | None:
    """HF_TOKEN, else the token ``hf auth login`` stored; None for public repos."""
    value = os.environ.get("HF_TOKEN")
    if value:
        return value
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    found: str | None = get_token()
    return found


def endpoint() -> str:
    """The Hub this machine talks to (``HF_ENDPOINT`` or huggingface.co); nodes are pointed at the same one."""
    value = os.environ.get("HF_ENDPOINT") or _hub().constants.ENDPOINT
    return str(value).rstrip("/")


def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:
        raise HubError("huggingface_hub is not installed here", fix="pip install huggingface_hub") from exc
    return huggingface_hub


def _translate(exc: Exception, repo: str, revision: str | None) -> HubError:
    """huggingface_hub's errors -> one HubError with the next step (the token never appears in these)."""
    from huggingface_hub import errors as hf

    name = type(exc).__name__
    where = f"{repo}@{revision}" if revision else repo
    if isinstance(exc, hf.RevisionNotFoundError):
        return HubError(f"{where}: no such revision on {endpoint()}", fix="Check the branch, tag or commit.")
    if isinstance(exc, hf.GatedRepoError):
        return HubError(f"{repo} is gated: accept its terms on the Hub first",
                        fix="Accept the terms on the model's page, then set HF_TOKEN or run `hf auth login`.")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return HubError(f"{repo}: not found on {endpoint()} (or private and no valid token was sent)",
                        fix="Check the id; for a private repo set HF_TOKEN or run `hf auth login`.")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 401:
        return HubError(f"{repo}: the Hub refused the token (401)", fix="Set a valid HF_TOKEN or `hf auth login`.")
    return HubError(f"{where}: cannot read it from {endpoint()}: {name}: {str(exc)[:300]}",
                    fix="Check this machine's connection to the Hub (HF_ENDPOINT for a mirror).")


def snapshot(repo: str, revision: str | None = None, *, hf_token: str | None = None) -> HubSnapshot:
    """Every file of ``repo`` at ``revision`` (default main), resolved to one commit, with sizes and hashes."""
    hub = _hub()
    api = hub.HfApi(endpoint=endpoint())
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True, token=hf_token or False)
    except Exception as exc:  # noqa: BLE001 - translated at this boundary
        raise _translate(exc, repo, revision) from exc
    commit = str(info.sha or "")
    if not COMMIT_RE.fullmatch(commit):
        raise HubError(f"{repo}: the Hub gave no commit for {revision or 'main'}", fix="Try again, or pin a commit.")
    files = []
    for s in info.siblings or []:
        if s.size is None:
            raise HubError(f"{repo}: the Hub listed {s.rfilename} without a size", fix="Try again later.")
        lfs = s.lfs.sha256 if s.lfs is not None else None
        files.append(HubFile(s.rfilename, int(s.size), lfs, None if lfs else s.blob_id))
    return HubSnapshot(repo, revision or "main", commit, tuple(sorted(files, key=lambda f: f.name)))


def small_files(snap: HubSnapshot, names: list[str], *, hf_token: str | None = None) -> dict[str, Any]:
    """The JSON content of small files (config.json, the index) at the snapshot's commit, read through
    forklift's own cache; a name the commit lacks is left out."""
    hub = _hub()
    present = snap.by_name()
    out: dict[str, Any] = {}
    for name in names:
        if name not in present:
            continue
        try:
            path = hub.hf_hub_download(snap.repo, name, revision=snap.commit, cache_dir=str(cache_dir()),
                                       endpoint=endpoint(), token=hf_token or False)
            out[name] = json.loads(Path(path).read_text())
        except Exception as exc:  # noqa: BLE001 - translated at this boundary
            raise _translate(exc, snap.repo, snap.commit) from exc
    return out


def cache_dir() -> Path:
    return paths.cache_dir() / "hub"
