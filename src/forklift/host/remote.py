"""File operations on a host through its Runner (cat/tee/tail argv), the same locally and over SSH."""

from __future__ import annotations

from forklift.errors import RemoteCommandError
from forklift.runner import Runner


def write_text(runner: Runner, path: str, text: str, *, timeout: float = 60) -> None:
    """Write text to path on the host (parent directories created)."""
    parent = path.rsplit("/", 1)[0] or "/"
    runner.run(["mkdir", "-p", parent], timeout=timeout).check()
    res = runner.run(["tee", path], input=text, timeout=timeout)
    if res.returncode != 0:
        raise RemoteCommandError(
            f"{runner.host}: could not write {path}: {res.stderr.strip()[-200:]}",
            host=runner.host, argv=["tee", path], returncode=res.returncode, stderr_tail=res.stderr[-500:],
            fix=f"Check that {parent} is writable on {runner.host}.",
        )


def read_from(runner: Runner, path: str, offset: int, *, timeout: float = 30) -> tuple[list[str], int]:
    """Complete lines written to path after byte offset, and the new offset. Missing file: no lines."""
    res = runner.run(["tail", "-c", f"+{offset + 1}", path], timeout=timeout)
    if res.returncode != 0 or not res.stdout:
        return [], offset
    # Runners decode with errors="replace": exact for UTF-8 logs (a character cut at the end lies after the last
    # newline); a byte that is not UTF-8 reads as U+FFFD and moves the offset by two bytes, never a crash.
    data = res.stdout.encode("utf-8")
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        return [], offset
    return data[:cut].decode("utf-8", "replace").splitlines(), offset + cut


def tail(runner: Runner, path: str, lines: int | None = None, *, timeout: float = 30) -> list[str]:
    """The last lines of a file on the host ([] when it does not exist)."""
    if lines is not None and lines <= 0:
        return []
    argv = ["tail", "-n", str(lines), path] if lines else ["cat", path]
    res = runner.run(argv, timeout=timeout)
    if res.returncode != 0:
        return []
    return res.stdout.splitlines()


def home_dir(runner: Runner) -> str:
    res = runner.run(["sh", "-c", "printf %s \"$HOME\""], timeout=30).check()
    home = res.stdout.strip()
    if not home.startswith("/"):
        raise RemoteCommandError(f"{runner.host}: cannot tell the home directory (got {home!r})",
                                 host=runner.host, argv=["printf", "$HOME"], returncode=0,
                                 fix="Set HOME for the ssh user on that host.")
    return home


def remove_stale_run_dirs(runner: Runner, parent: str, name: str, keep: str, *, timeout: float = 60) -> None:
    """Delete parent/NAME-<12 hex run id> folders other than keep: earlier runs of this deployment name,
    whose record the new run replaces (so one folder per name stays on each node). Matched exactly, never
    by a looser glob, so other deployments' folders are untouched."""
    pattern = ".*/" + name.replace(".", "\\.") + "-[0-9a-f]{12}"
    runner.run(["find", parent, "-mindepth", "1", "-maxdepth", "1", "-type", "d", "-regextype", "posix-extended",
                "-regex", pattern, "!", "-path", keep, "-exec", "rm", "-rf", "{}", "+"], timeout=timeout)
