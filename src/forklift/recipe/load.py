"""Load recipes: a bundled name or a YAML path, ``extends:`` chains, ``--set a.b=value`` overrides.

Errors name the file, the field path and the fix, with a "did you mean" for misspelt keys.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from forklift.errors import RecipeError, RecipeNotFoundError
from forklift.recipe.schema import Recipe
from forklift.yamlio import TooManyValuesError, load_user

DEFAULT_RECIPE = "default"
_MAX_EXTENDS_DEPTH = 8


def bundled_names() -> list[str]:
    """Names of the recipes shipped with forklift."""
    folder = resources.files("forklift.recipe") / "recipes"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _read_source(ref: str, relative_to: Path | None) -> tuple[str, str, str]:
    """Return (display name, yaml text, directory for relative extends) for a name or path."""
    candidates: list[Path] = []
    as_path = Path(ref).expanduser()
    if relative_to is not None and not as_path.is_absolute():
        candidates.append(relative_to / as_path)
    candidates.append(as_path)
    for cand in candidates:
        if cand.is_file():
            return str(cand), read_text(cand), str(cand.parent.resolve())
    if ref in bundled_names():
        text = (resources.files("forklift.recipe") / "recipes" / f"{ref}.yaml").read_text()
        return f"bundled:{ref}", text, ""
    close = difflib.get_close_matches(ref, bundled_names(), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise RecipeNotFoundError(
        f"recipe '{ref}' not found: no such file and no bundled recipe of that name.{hint}",
        fix="Run `forklift recipe list` for bundled recipes, or pass a path to a YAML file.",
    )


MAX_RECIPE_BYTES = 1024 * 1024


def read_text(path: Path) -> str:
    """A recipe or cluster file as text: UTF-8, not binary, not huge; anything else is a RecipeError."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read: {exc.strerror or exc}", source=str(path),
                          fix="Check the path and its permissions.") from exc
    if len(raw) > MAX_RECIPE_BYTES:
        raise RecipeError(f"{path}: {len(raw):,} bytes is too large for a recipe (limit {MAX_RECIPE_BYTES:,})",
                          source=str(path), fix="Pass the recipe YAML file, not a model or log file.")
    if b"\0" in raw:
        raise RecipeError(f"{path}: a binary file, not a YAML recipe", source=str(path),
                          fix="Pass a recipe YAML file (`forklift recipe list` shows the bundled ones).")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                          source=str(path),
                          fix=f"Save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 {path}`).") from None


def _parse_yaml(display: str, text: str) -> dict[str, Any]:
    try:
        data = load_user(text)
    except yaml.YAMLError as exc:
        raise RecipeError(f"{display}: not valid YAML: {exc}", source=display,
                          fix="Fix the YAML syntax at the position shown.") from exc
    except TooManyValuesError as exc:
        raise RecipeError(f"{display}: {exc}", source=display,
                          fix="A recipe is a few hundred values: write them out rather than nesting aliases.") from None
    except ValueError as exc:
        raise RecipeError(f"{display}: {exc}", source=display,
                          fix="Quote the value (\"2024-01-01\"), or remove the YAML tag (!!binary, !!set).") from None
    except RecursionError:
        raise RecipeError(f"{display}: nested too deeply to be a recipe", source=display,
                          fix="A recipe is a few levels of mappings (model:, serve:, nodes: ...).") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError(f"{display}: a recipe must be a mapping, got {type(data).__name__}", source=display,
                          fix="Start the file with keys such as `model:` and `serve:`.")
    return data


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``over`` into ``base``: mappings merge key by key, anything else is replaced."""
    out: dict[str, Any] = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _resolve_raw(ref: str, relative_to: Path | None, seen: list[str]) -> tuple[str, dict[str, Any]]:
    display, text, folder = _read_source(ref, relative_to)
    if display in seen:
        raise RecipeError(f"{display}: `extends` loops: {' -> '.join([*seen, display])}", source=display,
                          fix="Remove the cycle from the extends chain.")
    if len(seen) >= _MAX_EXTENDS_DEPTH:
        raise RecipeError(f"{display}: extends chain deeper than {_MAX_EXTENDS_DEPTH}", source=display,
                          fix="Flatten the chain: extend a recipe that does not itself extend several others.")
    data = _parse_yaml(display, text)
    parent = data.get("extends")
    if parent is None:
        return display, data
    if not isinstance(parent, str) or not parent.strip():
        raise RecipeError(f"{display}: extends: must be a recipe name or path, not {parent!r}", source=display,
                          fix="Write `extends: NAME` with a bundled recipe (`forklift recipe list`) or a YAML path.")
    try:
        _, base = _resolve_raw(parent, Path(folder) if folder else relative_to, [*seen, display])
    except RecipeNotFoundError as exc:
        raise RecipeNotFoundError(f"{display}: extends: {exc.message}", source=display, fix=exc.fix) from None
    base.pop("name", None)
    merged = deep_merge(_for_another_model(base, data), data)
    return display, merged


def _for_another_model(base: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """``model.capabilities`` describe the parent's model: a recipe that names another ``model.source`` does not
    inherit them (it states its own, over the defaults)."""
    mine, theirs = data.get("model"), base.get("model")
    if not (isinstance(mine, Mapping) and isinstance(theirs, Mapping)):
        return base
    if "source" not in mine or mine["source"] == theirs.get("source"):
        return base
    return {**base, "model": {k: v for k, v in theirs.items() if k != "capabilities"}}


SET_EXAMPLES = ("Examples: --set serve.port=8001; a list: --set 'patches=[kv-scale-loader-args]' or one entry: "
                "--set patches.0=kv-scale-loader-args; a node's field: --set nodes.1.data_ip=10.0.0.2.")


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value`` -> (["a", "b"], value parsed as YAML scalar/list)."""
    if "=" not in item:
        raise RecipeError(f"--set {item!r}: expected KEY.PATH=VALUE", fix=SET_EXAMPLES)
    key, _, raw = item.partition("=")
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise RecipeError(f"--set {item!r}: empty key", fix=SET_EXAMPLES)
    try:
        value = load_user(raw) if raw.strip() else None
    except (yaml.YAMLError, RecursionError, ValueError):
        value = raw
    return path, value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(data))
    for item in overrides:
        path, value = parse_override(item)
        cursor: Any = out
        for i, part in enumerate(path[:-1]):
            if isinstance(cursor, list):
                try:
                    cursor = cursor[int(part)]
                    continue
                except (ValueError, IndexError) as exc:
                    raise RecipeError(f"--set {item}: '{'.'.join(path[: i + 1])}' is not an index of that list "
                                      f"(it has {len(cursor)} entries)", fix=SET_EXAMPLES) from exc
            nxt = cursor.get(part)
            if not isinstance(nxt, dict | list):
                nxt = [] if path[i + 1].isdigit() else {}  # --set patches.0=x makes the list it names
                cursor[part] = nxt
            cursor = nxt
        last = path[-1]
        if isinstance(cursor, list):
            try:
                index = int(last)
            except ValueError as exc:
                raise RecipeError(f"--set {item}: '{last}' is not a list index", fix=SET_EXAMPLES) from exc
            if index == len(cursor):
                cursor.append(value)  # --set patches.N=x appends at the end
            elif 0 <= index < len(cursor):
                cursor[index] = value
            else:
                raise RecipeError(f"--set {item}: index {index} is past the end of a list of {len(cursor)}",
                                  fix=SET_EXAMPLES)
        else:
            cursor[last] = value
    return out


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The pydantic model class that owns the field at ``loc`` (for did-you-mean suggestions)."""
    current: Any = Recipe
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            # discriminated union tags appear in loc as the tag name
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            kind = current.model_fields.get("kind")
            if kind is not None and kind.default == part:
                continue  # a discriminated union's tag in the error location
            return None
        current = _unwrap(field.annotation, loc)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any, loc: Sequence[int | str]) -> Any:
    from typing import get_args

    args = [a for a in get_args(annotation) if a is not type(None)]
    models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
    for a in args:  # list[Node] / Annotated[Union, ...]
        for inner in get_args(a):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                models.append(inner)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if len(models) == 1:
        return models[0]
    for m in models:  # discriminated: choose by tag present in loc
        tag = m.model_fields.get("kind")
        if tag is not None and tag.default in loc:
            return m
    return models[0] if models else None


def _override_for(loc: Sequence[int | str], overrides: Sequence[str]) -> str | None:
    """The ``--set`` item that wrote the field at ``loc`` (or a parent of it), if one did."""
    dotted = [str(p) for p in loc if p not in ("venv", "docker")]
    for item in reversed(list(overrides)):
        key = [p for p in item.partition("=")[0].strip().split(".") if p]
        if key and dotted and dotted[: len(key)] == key[: len(dotted)]:  # the field, its parent, or a child
            return item
    return None


def format_validation_error(display: str, exc: ValidationError, overrides: Sequence[str] = ()) -> RecipeError:
    problems: list[str] = []
    for err in exc.errors():
        loc = [p for p in err["loc"]]
        path = ".".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            owner = _model_at(loc[:-1]) if len(loc) > 1 else Recipe
            known = sorted(owner.model_fields) if owner else []
            close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
            listing = f"; known keys: {', '.join(known)}" if known else ""
            hint = f"; did you mean '{close[0]}'?" if close else listing
            shown = ".".join(str(p) for p in loc if p not in ("venv", "docker"))
            problems.append(f"{shown}: unknown field{hint}")
        elif err["type"] == "missing":
            problems.append(f"{path}: required field missing")
        else:
            got = err.get("input")
            got_s = "" if isinstance(got, dict | list) else f" (got {got!r})"
            problems.append(f"{path}: {str(err['msg']).removeprefix('Value error, ')}{got_s}")
    blamed = [_override_for(list(err["loc"]), overrides) for err in exc.errors()]
    lines = "\n".join(f"  --set {who}: {p}" if who else f"  {display}: {p}" for p, who in zip(problems, blamed,
                                                                                                   strict=True))
    if all(blamed):
        where, fix = "in --set", "Fix the --set items named above; `forklift recipe schema` lists every field."
        source = "--set " + " ".join(sorted({str(b) for b in blamed}))
    else:
        where, fix = "in the recipe", "Fix the fields named above; `forklift recipe schema` lists every field."
        source = display
    return RecipeError(f"{display}: {len(problems)} problem(s) {where}:\n{lines}", source=source,
                       problems=problems, fix=fix)


def validate(data: Mapping[str, Any], display: str = "<recipe>", *, overrides: Sequence[str] = ()) -> Recipe:
    """A Recipe from plain data; errors name the field and blame the ``--set`` item that wrote it, if any."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise format_validation_error(display, exc, overrides) from None
    except RecursionError:
        raise RecipeError(f"{display}: nested too deeply to be a recipe", source=display,
                          fix="A recipe is a few levels of keys: see `forklift recipe show default`.") from None


def load_raw(ref: str | None = None, overrides: Sequence[str] = ()) -> tuple[str, dict[str, Any]]:
    """(display name, data) of a recipe with ``extends`` resolved and ``--set`` overrides applied, unvalidated."""
    ref = ref or DEFAULT_RECIPE
    display, data = _resolve_raw(ref, None, [])
    data.setdefault("name", Path(ref).stem if display != f"bundled:{ref}" else ref)
    return display, apply_overrides(data, overrides)


def load(ref: str | None = None, overrides: Sequence[str] = ()) -> Recipe:
    """Load a recipe by bundled name or path, resolve ``extends``, apply ``--set`` overrides, validate.

    This is the recipe alone; commands start from ``forklift.recipe.resolve`` (cluster file, node facts)."""
    display, data = load_raw(ref, overrides)
    return validate(data, display, overrides=overrides)


def schema() -> dict[str, Any]:
    return Recipe.model_json_schema()
