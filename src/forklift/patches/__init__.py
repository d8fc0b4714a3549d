"""vLLM source patches that know their versions, detect drift, and revert byte for byte.

Patches are data (``catalog/*.yaml``, see ``spec``); ``core`` is the engine (standard library only,
it also runs on nodes and in containers); ``operations`` holds the targets and operations; ``releases``
fetches published releases for compatibility checks; ``entrypoint`` renders the docker wrapper.
"""

from __future__ import annotations

from forklift.errors import PatchConflictError, PatchReadOnlyError, PatchVerifyError, PatchVersionError
from forklift.patches.entrypoint import render_entrypoint
from forklift.patches.operations import (
    AppliedPatch,
    CompatReport,
    PatchedFile,
    RevertResult,
    VerifyResult,
    apply,
    apply_for_recipe,
    check_releases,
    dir_tree,
    open_tree,
    revert,
    status,
    verify,
)
from forklift.patches.spec import Patch, catalog, get, load_patch_file, parse_patch

__all__ = [
    "AppliedPatch",
    "CompatReport",
    "Patch",
    "PatchConflictError",
    "PatchReadOnlyError",
    "PatchVerifyError",
    "PatchVersionError",
    "PatchedFile",
    "RevertResult",
    "VerifyResult",
    "apply",
    "apply_for_recipe",
    "catalog",
    "check_releases",
    "dir_tree",
    "get",
    "load_patch_file",
    "open_tree",
    "parse_patch",
    "render_entrypoint",
    "revert",
    "status",
    "verify",
]
