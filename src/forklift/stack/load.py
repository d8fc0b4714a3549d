"""Read STACK.yaml: errors name the file, the field path and a did-you-mean for misspelt keys."""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from forklift import yamlio
from forklift.errors import RecipeError, RecipeNotFoundError
from forklift.recipe.load import read_text
from forklift.stack.schema import Member, StackFile


def _owner(loc: tuple[int | str, ...]) -> type[BaseModel]:
    return Member if loc and loc[0] == "members" and len(loc) > 2 else StackFile


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            known = sorted(_owner(loc).model_fields)
            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            out.append(f"{path}: unknown field" + (f"; did you mean '{close[0]}'?" if close
                                                   else f"; known keys: {', '.join(known)}"))
        elif err["type"] == "missing":
            out.append(f"{path}: required field missing")
        else:
            out.append(f"{path}: {str(err['msg']).removeprefix('Value error, ')}")
    return out


def parse(text: str, display: str = "<stack>") -> StackFile:
    try:
        data = yamlio.load_user(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        raise RecipeError(f"{display}: not a YAML mapping: {type(exc).__name__}: {str(exc)[:300]}", source=display,
                          fix="Fix the YAML named above.") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{display}: a stack file is a mapping with `name` and `members`", source=display,
                          fix="See README.md (Stacks) for an example.")
    try:
        return StackFile.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
        lines = "\n".join(f"  {display}: {p}" for p in problems)
        raise RecipeError(f"{display}: {len(problems)} problem(s) in the stack file:\n{lines}", source=display,
                          problems=problems, fix="Fix the fields named above.") from None


def load(path: str | Path) -> tuple[StackFile, Path]:
    """The stack and the folder its relative recipe paths start from."""
    p = Path(path)
    if not p.is_file():
        raise RecipeNotFoundError(f"no stack file at {p}", source=str(p), fix="Give the path of a STACK.yaml.")
    return parse(read_text(p), str(p)), p.resolve().parent
