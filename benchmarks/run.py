"""Run every ``benchmarks/*.py`` module that defines ``main()``, in name order, each with its defaults.

``python -m benchmarks.run [NAME ...]`` runs only the named ones. A benchmark that raises is reported
and the others still run; the exit status is 1 if any failed. Modules are discovered, not listed.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def discover() -> list[str]:
    """Names of modules directly under benchmarks/ (not this one, not private ones)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(HERE)])
                  if not m.ispkg and m.name != "run" and not m.name.startswith("_"))


def main(argv: Sequence[str] | None = None) -> int:
    wanted = list(argv if argv is not None else sys.argv[1:])
    names = [n for n in discover() if not wanted or n in wanted]
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(discover())}", file=sys.stderr)
        return 2
    failed: list[str] = []
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        entry: Callable[[], Any] | None = getattr(module, "main", None)
        if not callable(entry):
            continue
        print(f"== benchmarks.{name}", flush=True)
        t0 = time.monotonic()
        try:
            rc = entry()
        except SystemExit as exc:
            rc = exc.code
        except Exception:  # noqa: BLE001 - one broken benchmark must not hide the others
            traceback.print_exc()
            rc = 1
        ok = rc in (None, 0) or not isinstance(rc, int)
        print(f"== benchmarks.{name}: {'ok' if ok else f'FAILED ({rc})'} in {time.monotonic() - t0:.1f}s", flush=True)
        if not ok:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
