"""What a node looks like right now, read through a Runner (the same locally and over SSH).

Files are read under ``root`` (a prefix, ``/`` on a real node, a temporary directory in tests);
kernel values (sysctl, /proc/meminfo, /proc/swaps) and processes are always the real ones.
"""

from __future__ import annotations

import base64
import json
import posixpath
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forklift.errors import NodeError, RunnerError
from forklift.host.facts import probe
from forklift.node.profile import NodeProfile
from forklift.runner import Completed, LocalRunner, Runner

# Where forklift keeps its node files (paths on the node, before the root prefix).
STATE_FILE = "/var/lib/forklift/node/state.json"
GUARD_UNIT = "forklift-guard.service"
GUARD_UNIT_FILE = "/etc/systemd/system/forklift-guard.service"
GUARD_CONFIG = "/etc/forklift/guard.json"
GUARD_MODULE = "/usr/local/lib/forklift/forklift_guard.py"
GUARD_HEARTBEAT = "/run/forklift/guard-heartbeat.json"
GUARD_LOG = "/var/log/forklift-guard.log"
FSTAB = "/etc/fstab"
# systemd-logind's configuration (logind.conf(5)): the main file, then *.conf drop-ins from these directories sorted
# by file name (a later name overrides; for one name /etc hides /run hides /usr/local/lib hides /usr/lib).
LOGIND_CONF = "/etc/systemd/logind.conf"
LOGIND_DROPIN_DIRS = ("/usr/lib/systemd/logind.conf.d", "/usr/local/lib/systemd/logind.conf.d",
                      "/run/systemd/logind.conf.d", "/etc/systemd/logind.conf.d")
LOGIND_DROPIN = "/etc/systemd/logind.conf.d/99-forklift-keep-ipc.conf"
SYSTEM_UID_MAX = 999
"""logind's RemoveIPC spares system users (uid <= SYSTEM_UID_MAX, systemd's compiled-in default) and root."""
REPORTED_SYSCTLS = (
    "vm.swappiness", "vm.vfs_cache_pressure", "vm.min_free_kbytes", "vm.dirty_ratio", "vm.dirty_background_ratio",
)
OTHER_GUARDS = {
    "earlyoom": "earlyoom kills by its own rules (and sparkrun's setup prefers killing vllm/python)",
    "nohang": "nohang kills by its own rules",
    "systemd-oomd": "systemd-oomd kills whole cgroups under memory pressure",
    "oomd": "oomd kills whole cgroups under memory pressure",
    "oom_fixer.sh": "seed 002's oom_fixer protects processes by name (any 'python' matching its pattern)",
    "cache_dropper.s": "seed 002's cache_dropper drops caches every second regardless of load",
}

_READ_FILES = (
    'for f; do if [ -e "$f" ]; then printf "%s\\t%s\\t" "$f" "$(stat -c "%a %u:%g" -- "$f")"; '
    'base64 -w0 -- "$f" 2>/dev/null || printf "!"; printf "\\n"; else printf "%s\\t-\\t\\n" "$f"; fi; done'
)
_READ_VALUES = 'for f; do v=$(cat -- "$f" 2>/dev/null) || v="?"; printf "%s\\t%s\\n" "$f" "$v"; done'
_EXISTING_DIRS = 'for d; do [ -d "$d" ] && printf "%s\\n" "$d"; done; true'
_CONF_FILES = 'for d; do for f in "$d"/*.conf; do [ -f "$f" ] && printf "%s\\n" "$f"; done; done; true'


def under(root: str, path: str) -> str:
    """``path`` (absolute, on the node) inside ``root``."""
    if root in ("", "/"):
        return path
    return posixpath.join(root.rstrip("/"), path.lstrip("/"))


def sysctl_proc_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


@dataclass(frozen=True)
class FileFact:
    """One file's previous state: enough to put it back byte for byte."""

    path: str
    exists: bool
    mode: str | None = None
    owner: str | None = None
    content: bytes | None = None

    @property
    def text(self) -> str | None:
        return None if self.content is None else self.content.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class SwapArea:
    path: str
    size_bytes: int
    used_bytes: int


@dataclass(frozen=True)
class SwapFileFact:
    exists: bool
    size_bytes: int | None = None
    mode: str | None = None
    is_swap: bool | None = None
    """True when the file carries a swap signature; None when it could not be read."""


@dataclass(frozen=True)
class UnitFact:
    enabled: str
    """`systemctl is-enabled` word: enabled, disabled, static, not-found, ..."""
    active: str
    """`systemctl is-active` word: active, inactive, failed, activating, ..."""


@dataclass(frozen=True)
class Heartbeat:
    data: Mapping[str, Any]
    age_s: float
    pid_alive: bool

    @property
    def pid(self) -> int | None:
        pid = self.data.get("pid")
        return pid if isinstance(pid, int) else None


@dataclass(frozen=True)
class PrepFacts:
    """What node preparation reads (sysctls, files, swap, units, guards); memory comes from the host probe."""

    host: str
    root: str
    uid: int
    init: str
    has_systemd: bool
    now: float
    hostname: str
    sysctl: Mapping[str, str | None]
    meminfo: Mapping[str, int]
    """Bytes, keyed as in /proc/meminfo (``host.HostFacts.memory``)."""
    swaps: tuple[SwapArea, ...]
    files: Mapping[str, FileFact]
    """Keyed by node path (without the root prefix)."""
    existing_dirs: frozenset[str]
    """Node paths of the parent directories forklift may need that already exist."""
    swap_file: SwapFileFact | None
    guard_unit: UnitFact | None
    display_manager: UnitFact | None
    heartbeat_path: str
    heartbeat: Heartbeat | None
    heartbeat_error: str | None
    other_guards: tuple[tuple[int, str], ...]
    guard_python: str
    guard_python_ok: bool
    sudo_ok: bool
    notes: tuple[str, ...] = field(default_factory=tuple)
    logind: tuple[FileFact, ...] = ()
    """systemd-logind's configuration files that exist, in the order logind reads them (``logind_order``)."""

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    def file(self, path: str) -> FileFact:
        return self.files.get(path, FileFact(path, exists=False))

    @property
    def swap_total_bytes(self) -> int:
        return sum(s.size_bytes for s in self.swaps)


def managed_files(profile: NodeProfile) -> list[str]:
    """Every file (node path) apply may write, besides the swap file."""
    return [FSTAB, profile.sysctl_file, GUARD_UNIT_FILE, GUARD_CONFIG, GUARD_MODULE, LOGIND_DROPIN, STATE_FILE]


def parent_dirs(paths: Iterable[str]) -> list[str]:
    """All ancestors of ``paths`` (node paths), shallowest first, without '/'."""
    out: set[str] = set()
    for p in paths:
        d = posixpath.dirname(p)
        while d not in ("/", ""):
            out.add(d)
            d = posixpath.dirname(d)
    return sorted(out, key=lambda d: (d.count("/"), d))


def guard_python_for(runner: Runner) -> str:
    """The interpreter the guard unit runs: this one for the local node (it has psutil), python3 elsewhere."""
    return sys.executable if isinstance(runner, LocalRunner) else "/usr/bin/python3"


def gather(runner: Runner, profile: NodeProfile, *, root: str = "/") -> PrepFacts:
    """Read every fact ``check`` and ``apply`` need, in a handful of commands."""
    notes: list[str] = []
    uid = int(_out(runner, ["id", "-u"]).strip() or "-1")
    init = _run(runner, ["cat", "/proc/1/comm"]).stdout.strip() or "?"
    has_systemd = _run(runner, ["test", "-d", "/run/systemd/system"]).ok
    now = float(_out(runner, ["date", "+%s"]).strip())
    hostname = _run(runner, ["hostname"]).stdout.strip()

    keys = list(dict.fromkeys([*REPORTED_SYSCTLS, *profile.sysctl]))
    values = _tabbed(_out(runner, ["sh", "-c", _READ_VALUES, "forklift-read", *map(sysctl_proc_path, keys)]))
    sysctl = {k: (None if values.get(sysctl_proc_path(k), "?") == "?" else values[sysctl_proc_path(k)])
              for k in keys}

    host = probe(runner, ("memory",))
    if host.memory is None:
        raise NodeError(f"{runner.host}: {host.unread.get('memory', 'cannot read /proc/meminfo')}",
                        fix=f"Check that {runner.host} is a Linux host with coreutils.")
    swaps = parse_swaps(_out(runner, ["cat", "/proc/swaps"]))

    files = _read_files(runner, root, managed_files(profile))
    dirs = parent_dirs([*managed_files(profile), *([profile.swap.path] if profile.swap else [])])
    listed = _out(runner, ["sh", "-c", _EXISTING_DIRS, "forklift-dirs", *(under(root, d) for d in dirs)])
    by_host_path = {under(root, d): d for d in dirs}
    existing = frozenset(by_host_path[line] for line in listed.splitlines() if line in by_host_path)

    sudo_ok = uid == 0 or _sudo_works(runner)
    prefix: list[str] | None = [] if uid == 0 else (["sudo", "-n"] if sudo_ok else None)
    swap_file = _swap_file(runner, under(root, profile.swap.path), prefix) if profile.swap else None

    guard_unit = display = None
    if has_systemd:
        guard_unit = _unit(runner, GUARD_UNIT)
        display = _unit(runner, profile.display_manager.unit)

    hb_path = GUARD_HEARTBEAT
    config = files[GUARD_CONFIG]
    if config.content is not None:
        try:
            hb_path = str(json.loads(config.content).get("heartbeat", GUARD_HEARTBEAT))
        except (ValueError, AttributeError):
            notes.append(f"{GUARD_CONFIG} is not valid JSON")
    heartbeat, hb_error = _heartbeat(runner, under(root, hb_path), now)

    procs = _run(runner, ["ps", "-eo", "pid=,comm="]).stdout
    others = tuple((int(pid), comm) for pid, comm in _ps(procs) if comm in OTHER_GUARDS)

    python = guard_python_for(runner)
    python_ok = _run(runner, [python, "-c", "import psutil"]).ok
    logind = _logind_files(runner, root)

    return PrepFacts(
        host=runner.host, root=root, uid=uid, init=init, has_systemd=has_systemd, now=now, hostname=hostname,
        sysctl=sysctl, meminfo=host.memory, swaps=swaps, files=files, existing_dirs=existing, swap_file=swap_file,
        guard_unit=guard_unit, display_manager=display, heartbeat_path=hb_path, heartbeat=heartbeat,
        heartbeat_error=hb_error, other_guards=others, guard_python=python, guard_python_ok=python_ok,
        sudo_ok=sudo_ok, notes=tuple(notes), logind=logind,
    )


def logind_order(paths: Iterable[str]) -> list[str]:
    """logind's reading order of its configuration files (node paths): the main file first, then one drop-in per
    file name, sorted by name, the one in the most important directory winning (logind.conf(5) CONFIGURATION
    DIRECTORIES AND PRECEDENCE)."""
    rank = {d: i for i, d in enumerate(LOGIND_DROPIN_DIRS)}
    main = [p for p in paths if p == LOGIND_CONF]
    chosen: dict[str, str] = {}
    for p in paths:
        d, name = posixpath.split(p)
        if d in rank and name.endswith(".conf") and (name not in chosen or
                                                      rank[d] > rank[posixpath.dirname(chosen[name])]):
            chosen[name] = p
    return main + [chosen[n] for n in sorted(chosen)]


def remove_ipc(files: Iterable[FileFact]) -> tuple[bool, str]:
    """logind's effective RemoveIPC and where it was set: the last ``RemoveIPC=`` of a [Login] section in reading
    order; systemd's default (yes) when no file sets it."""
    value, source = True, "systemd's default"
    for fact in files:
        section = ""
        for raw in (fact.text or "").splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
                continue
            key, sep, val = line.partition("=")
            if sep and section == "Login" and key.strip() == "RemoveIPC":
                word = val.strip().lower()
                if word in ("yes", "true", "on", "1", "y", "t"):
                    value, source = True, fact.path
                elif word in ("no", "false", "off", "0", "n", "f"):
                    value, source = False, fact.path
    return value, source


def parse_swaps(text: str) -> tuple[SwapArea, ...]:
    out = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 4 and parts[2].isdigit():
            out.append(SwapArea(parts[0], int(parts[2]) * 1024, int(parts[3]) * 1024))
    return tuple(out)


def parse_sysctl_conf(text: str | None) -> dict[str, str]:
    """key -> value from a sysctl.d file (last assignment wins, comments ignored)."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip().lstrip("-").replace("/", ".")] = value.strip()
    return out


def fstab_entries(text: str | None, path: str) -> list[str]:
    """fstab lines whose first field is ``path`` (comments ignored)."""
    out = []
    for line in (text or "").splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#") and fields[0] == path:
            out.append(line)
    return out


# --- helpers ---------------------------------------------------------------------------------------


def _run(runner: Runner, argv: list[str]) -> Completed:
    """Run argv; a missing command reads as exit 127 (like a shell), so callers test ``.ok``."""
    try:
        return runner.run(argv, timeout=30)
    except RunnerError as exc:
        if "command not found" in exc.message:
            return Completed(runner.host, tuple(argv), 127, "", exc.message)
        raise


def _out(runner: Runner, argv: list[str]) -> str:
    res = _run(runner, argv)
    if not res.ok:
        raise NodeError(
            f"{runner.host}: `{' '.join(argv[:3])}` failed ({res.returncode}): {res.stderr.strip()[-200:]}",
            fix=f"Check that {runner.host} is a Linux host with coreutils.",
        )
    return res.stdout


def _tabbed(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep:
            out[key] = value
    return out


def _read_files(runner: Runner, root: str, paths: list[str]) -> dict[str, FileFact]:
    host_paths = {under(root, p): p for p in paths}
    text = _out(runner, ["sh", "-c", _READ_FILES, "forklift-read", *host_paths])
    out: dict[str, FileFact] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or parts[0] not in host_paths:
            continue
        node_path = host_paths[parts[0]]
        if parts[1] == "-":
            out[node_path] = FileFact(node_path, exists=False)
            continue
        if parts[2].endswith("!"):
            raise NodeError(f"{runner.host}: cannot read {parts[0]}",
                            fix=f"Make {parts[0]} readable, or run forklift as root on {runner.host}.")
        mode, _, owner = parts[1].partition(" ")
        out[node_path] = FileFact(node_path, True, mode, owner, base64.b64decode(parts[2]))
    for p in paths:
        out.setdefault(p, FileFact(p, exists=False))
    return out


def _logind_files(runner: Runner, root: str) -> tuple[FileFact, ...]:
    """The logind configuration files that exist, read in logind's order."""
    dirs = {under(root, d): d for d in LOGIND_DROPIN_DIRS}
    listed = _out(runner, ["sh", "-c", _CONF_FILES, "forklift-logind", *dirs])
    found = [posixpath.join(dirs[posixpath.dirname(line)], posixpath.basename(line))
             for line in listed.splitlines() if posixpath.dirname(line) in dirs]
    order = logind_order([LOGIND_CONF, *found])
    files = _read_files(runner, root, order)
    return tuple(files[p] for p in order if files[p].exists)


def _sudo_works(runner: Runner) -> bool:
    return _run(runner, ["sudo", "-n", "true"]).ok


def _swap_file(runner: Runner, host_path: str, prefix: list[str] | None) -> SwapFileFact:
    """Size, mode and swap signature of an existing swap file (``prefix``: how to gain root, None: cannot)."""
    res = _run(runner, ["stat", "-c", "%s %a", "--", host_path])
    if not res.ok:
        return SwapFileFact(exists=False)
    size, _, mode = res.stdout.strip().partition(" ")
    is_swap = None if prefix is None else _run(runner, [*prefix, "swaplabel", host_path]).ok
    return SwapFileFact(exists=True, size_bytes=int(size), mode=mode, is_swap=is_swap)


def _unit(runner: Runner, unit: str) -> UnitFact:
    enabled = _run(runner, ["systemctl", "is-enabled", unit]).stdout.strip() or "not-found"
    active = _run(runner, ["systemctl", "is-active", unit]).stdout.strip() or "unknown"
    return UnitFact(enabled=enabled, active=active)


def _heartbeat(runner: Runner, host_path: str, now: float) -> tuple[Heartbeat | None, str | None]:
    res = _run(runner, ["cat", "--", host_path])
    if not res.ok:
        return None, f"no heartbeat at {host_path}"
    try:
        data = json.loads(res.stdout)
        stamp = float(data["time"])
    except (ValueError, KeyError, TypeError):
        return None, f"heartbeat {host_path} is unreadable"
    pid = data.get("pid")
    alive = isinstance(pid, int) and _run(runner, ["test", "-d", f"/proc/{pid}"]).ok
    return Heartbeat(data=data, age_s=max(0.0, now - stamp), pid_alive=alive), None


def _ps(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        pid, _, comm = line.strip().partition(" ")
        if pid.isdigit():
            out.append((pid, comm.strip()))
    return out
