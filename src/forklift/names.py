"""What forklift accepts as a name wherever a name reaches a command line: environment variable names and ssh
destinations. Kept at the bottom of the stack so recipes validate with the same rules the runners enforce."""

from __future__ import annotations

import ipaddress
import re

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

"""What an environment variable's name may be, everywhere forklift passes one (POSIX's portable names)."""


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (C0 or DEL): a newline ends a unit-file or YAML line, a tab or
    NUL splits a value, wherever the text goes on as one line."""
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


_SSH_HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
_SSH_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def check_ssh_target(target: str) -> None:
    """``[user@]host[:port]`` (IPv6 as ``[addr]:port`` or bare); raises ValueError naming what is wrong.

    Neither part may start with '-' or hold spaces, quotes or shell characters, so a target can never be read as
    an ssh option (``-oProxyCommand=...``) nor change a printed command line that a user copies."""
    user, at, rest = target.rpartition("@")
    if at and not _SSH_USER_RE.fullmatch(user):
        raise ValueError(f"{target!r}: the user part before '@' is not a user name")
    host, port = rest, None
    if rest.startswith("["):
        host, close, tail = rest[1:].partition("]")
        if not close or (tail and not tail.startswith(":")):
            raise ValueError(f"{target!r}: expected [IPv6]:PORT")
        port = tail[1:] if tail else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{target!r}: {host!r} is not an IPv6 address") from None
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
    elif rest.count(":") > 1:
        try:
            ipaddress.IPv6Address(rest)
        except ValueError:
            raise ValueError(f"{target!r}: not host, host:port or an IPv6 address") from None
        return
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{target!r}: port {port!r} is not a number from 1 to 65535 (user@host:2222)")
    if not _SSH_HOST_RE.fullmatch(host):
        raise ValueError(f"{target!r}: {host!r} is not a host name or address")
