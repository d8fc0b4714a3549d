"""The gateway's keys: one per person, stored as SHA-256 (the key itself is shown once, at ``add``), each with a
model allow-list (None: every model) and a rate limit in requests per minute (None: none).

Keys are 32 random bytes, so a fast hash is enough (nothing to brute-force); the gateway compares digests in
constant time. ``keys.json`` is written whole through a temporary file, readable by the owner only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from forklift import paths
from forklift.errors import GatewayKeyError, StateDirError

PREFIX = "fk-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def gateway_dir() -> Path:
    return paths.home() / "gateway"


def private_dir() -> Path:
    """The gateway's folder, made owner-only (keys, the audit log with its prompts under --log-content)."""
    d = gateway_dir()
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        d.chmod(0o700)
    except OSError as exc:
        raise StateDirError(f"cannot make the gateway's folder {d}: {exc.strerror or exc}",
                            fix="Point FORKLIFT_HOME at a folder you can write (runs, keys and logs).") from None
    return d


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One ``add`` / ``revoke`` at a time: each reads, changes and writes the whole file (a revoke racing an add
    must not come back)."""
    fd = os.open(private_dir() / "keys.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def keys_path() -> Path:
    return gateway_dir() / "keys.json"


@dataclass(frozen=True)
class KeyEntry:
    name: str
    sha256: str
    shown: str
    """The key's first characters (enough to tell two keys apart in a list, never enough to use)."""
    models: list[str] | None
    rpm: int | None
    created: float
    revoked: float | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def load_keys() -> dict[str, KeyEntry]:
    p = keys_path()
    if not p.is_file():
        return {}
    return {n: KeyEntry(**{"name": n, **{k: v for k, v in e.items() if k != "name"}})
            for n, e in json.loads(p.read_text()).items()}


def _save(keys: dict[str, KeyEntry]) -> None:
    p = keys_path()
    private_dir()
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({n: e.to_json() for n, e in keys.items()}, f, indent=2)
    tmp.replace(p)


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise GatewayKeyError(f"invalid key name {name!r}",
                              fix="Name a key after its person: letters, digits, '-', '.', '@' or '_'.")


def add(name: str, *, models: list[str] | None = None, rpm: int | None = None) -> tuple[KeyEntry, str]:
    """A new key for ``name``: (its stored entry, the key itself, which is not kept anywhere)."""
    _check_name(name)
    with _locked():
        keys = load_keys()
        if name in keys and keys[name].revoked is None:
            raise GatewayKeyError(f"a key named {name!r} already exists",
                                  fix=f"Revoke it first (`forklift gateway key revoke {name}`) or pick another name.")
        key = PREFIX + secrets.token_urlsafe(32)
        entry = KeyEntry(name, digest(key), key[:7] + "...", sorted(models) if models else None, rpm, time.time())
        keys[name] = entry
        _save(keys)
    return entry, key


def revoke(name: str) -> KeyEntry:
    with _locked():
        keys = load_keys()
        if name not in keys:
            raise GatewayKeyError(f"no key named {name!r}", fix="`forklift gateway key list` shows the keys.")
        entry = keys[name]
        if entry.revoked is None:
            entry = KeyEntry(**{**entry.to_json(), "revoked": time.time()})  # type: ignore[arg-type]
            keys[name] = entry
            _save(keys)
    return entry
