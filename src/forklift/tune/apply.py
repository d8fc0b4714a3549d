"""``tune --apply``: the winner's settings written into the recipe file, keeping its comments and layout
(ruamel.yaml round trip), with the evidence as a comment above ``serve:``. The new text is validated as a recipe
before it is offered; a bundled recipe is refused (it is not the owner's file)."""

from __future__ import annotations

import difflib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from forklift.errors import RecipeError, TuneError
from forklift.recipe.load import parse_override, read_text, validate
from forklift.yamlio import load_user, round_trip

MARK = "forklift tune"


@dataclass(frozen=True)
class Change:
    path: Path
    before: str
    after: str

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.before.splitlines(keepends=True), self.after.splitlines(keepends=True),
                                            fromfile=str(self.path), tofile=f"{self.path} (tune --apply)"))


def plan(path: Path, sets: Sequence[str], evidence: Sequence[str]) -> Change:
    """The recipe's new text with ``sets`` (``serve.KEY=VALUE`` items) and ``evidence`` lines as a comment."""
    if not path.is_file():
        raise TuneError(f"{path} is not a recipe file (a bundled recipe cannot be changed)",
                        fix="Copy it first (`forklift recipe show NAME > my.yaml`) and tune that file.")
    before = read_text(path)
    y = round_trip(before)
    # an earlier --apply's evidence comment is replaced, not stacked
    data = y.load("".join(ln for ln in before.splitlines(keepends=True) if not ln.startswith(f"# {MARK}:")))
    if not isinstance(data, CommentedMap):
        raise TuneError(f"{path}: not a mapping", fix="Pass a recipe file.")
    serve = data.get("serve")
    if serve is None:
        serve = CommentedMap()
        data["serve"] = serve
    for item in sets:
        keys, value = parse_override(item)
        if len(keys) != 2 or keys[0] != "serve":
            raise TuneError(f"tune sets only serve.* keys, not {item!r}", fix="A bug: report it.")
        serve[keys[1]] = value
    text = "\n".join(f"{MARK}: {line}" for line in evidence)
    data.yaml_set_comment_before_after_key("serve", before=text, indent=0)
    buf = io.StringIO()
    y.dump(data, buf)
    after = buf.getvalue()
    try:
        validate(_plain(after), str(path))
    except RecipeError as exc:
        raise TuneError(f"the tuned recipe would not load: {exc}", fix=exc.fix or "Report it.") from exc
    return Change(path, before, after)


def _plain(text: str) -> dict[str, Any]:
    data = load_user(text)
    return data if isinstance(data, dict) else {}


def write(change: Change) -> None:
    tmp = change.path.with_name(change.path.name + ".tune-tmp")
    tmp.write_text(change.after, encoding="utf-8")
    tmp.replace(change.path)
