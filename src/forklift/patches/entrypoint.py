"""The docker target: an entrypoint wrapper that applies patches inside the container, then execs vLLM.

Nothing is installed in the image. The wrapper is a POSIX sh script carrying ``core.py`` and the
patches as JSON; it runs them with the container's Python against the vLLM that Python imports, and
stops the container (exit 3, one ``[forklift-patch] ERROR`` line) before vLLM loads anything when a
patch cannot apply. Use it as ``docker run --entrypoint sh -v WRAPPER:/forklift/patch-entrypoint.sh:ro
IMAGE /forklift/patch-entrypoint.sh vllm serve ...``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from forklift.errors import PatchError
from forklift.patches.core import SPEC_FORMAT
from forklift.patches.operations import core_source
from forklift.patches.spec import Patch

CONTAINER_PATH = "/forklift/patch-entrypoint.sh"
_PROG_END = "FORKLIFT_PATCH_PROGRAM_END"


def render_entrypoint(patches: Sequence[Patch], *, python: str = "python3", ignore_version: bool = False) -> str:
    """The wrapper script's text. ``$FORKLIFT_PATCH_PYTHON`` overrides ``python`` at run time."""
    src = core_source()
    if _PROG_END in src:
        raise PatchError("core.py contains the here-document delimiter; rename the delimiter")
    entries = [{"patch": p.to_core().to_json(), "ignore_version": ignore_version, "because": None} for p in patches]
    spec = json.dumps({"format": SPEC_FORMAT, "patches": entries}, sort_keys=True)
    ids = ", ".join(p.id for p in patches) or "(none)"
    return (
        "#!/bin/sh\n"
        f"# forklift patch entrypoint: applies {ids} to this container's vLLM, then runs the command.\n"
        "set -eu\n"
        f"FORKLIFT_PATCH_PROGRAM=$(cat <<'{_PROG_END}'\n{src}\n{_PROG_END}\n)\n"
        f"FORKLIFT_PATCH_SPEC={shlex.quote(spec)}\n"
        f'"${{FORKLIFT_PATCH_PYTHON:-{python}}}" -c "$FORKLIFT_PATCH_PROGRAM" entry "$FORKLIFT_PATCH_SPEC"\n'
        'if [ "$#" -gt 0 ]; then exec "$@"; fi\n'
    )
