"""The knowledge base: YAML rule files shipped beside this module, and those third-party packages add through the
``forklift.doctor_rules`` entry point group, validated once when first used.

A plugin's entry point names a folder or YAML file of rules (or a callable returning paths), for example::

    [project.entry-points."forklift.doctor_rules"]
    site_rules = "my_rules:RULES_DIR"      # a pathlib.Path to a folder of *.yaml rule files

Plugin rules use the categories of categories.yaml and may not reuse a bundled rule's id.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from forklift.doctor.findings import CategoryInfo, Rule
from forklift.errors import DoctorError
from forklift.yamlio import load_data


def _parse(name: str, text: str) -> list[Rule]:
    try:
        data = load_data(text)
    except yaml.YAMLError as exc:
        raise DoctorError(f"doctor rules {name}: not YAML: {exc}", fix="Fix the YAML syntax.") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise DoctorError(f"doctor rules {name}: expected a mapping with a 'rules' list",
                          fix="Start the file with 'rules:'.")
    out = []
    for i, item in enumerate(data["rules"]):
        try:
            out.append(Rule.model_validate(item))
        except ValidationError as exc:
            rid = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise DoctorError(f"doctor rules {name}: rule {rid}: {where}: {first['msg']}",
                              fix="Correct that rule; see forklift/doctor/findings.py for the fields.") from exc
    return out


def load_rules(paths: list[Path] | None = None) -> list[Rule]:
    """Rules from the given YAML files, or the bundled knowledge base when none are given."""
    if paths is None:
        return list(_bundled())
    rules: list[Rule] = []
    for p in paths:
        rules.extend(_parse(str(p), p.read_text(encoding="utf-8")))
    _check_unique(rules)
    return rules


@lru_cache(maxsize=1)
def _bundled() -> tuple[Rule, ...]:
    folder = resources.files("forklift.doctor") / "rules"
    rules: list[Rule] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            rules.extend(_parse(f"rules/{entry.name}", entry.read_text(encoding="utf-8")))
    for name, path in _plugin_files():
        rules.extend(_parse(f"{name}: {path}", path.read_text(encoding="utf-8")))
    _check_unique(rules)
    return tuple(rules)


PLUGIN_GROUP = "forklift.doctor_rules"


def _yaml_files(where: Path) -> list[Path]:
    return sorted(where.glob("*.yaml")) if where.is_dir() else [where]


def _plugin_files() -> list[tuple[str, Path]]:
    """Rule files from every ``forklift.doctor_rules`` entry point, in entry point order."""
    out: list[tuple[str, Path]] = []
    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            obj: Any = ep.load()
            found = obj() if callable(obj) else obj
            paths = [Path(found)] if isinstance(found, str | Path) else [Path(p) for p in _iterable(found)]
        except Exception as exc:  # a broken plugin is named, never a traceback
            raise DoctorError(f"doctor rule plugin {ep.name!r} ({ep.value}) failed to load: "
                              f"{type(exc).__name__}: {exc}",
                              fix=f"Fix or uninstall the package that provides {ep.value}.") from exc
        for path in paths:
            if not path.exists():
                raise DoctorError(f"doctor rule plugin {ep.name!r} names {path}, which does not exist",
                                  fix=f"Fix or uninstall the package that provides {ep.value}.")
            out.extend((f"plugin {ep.name}", f) for f in _yaml_files(path))
    return out


def _iterable(found: Any) -> Iterable[Any]:
    if not isinstance(found, Iterable):
        raise TypeError(f"expected a path or a list of paths, got {type(found).__name__}")
    return found


@lru_cache(maxsize=1)
def load_categories() -> dict[str, CategoryInfo]:
    """Per category: the generic title, cause, fix, how to verify it and the usual recipe key."""
    entry = resources.files("forklift.doctor") / "categories.yaml"
    data = load_data(entry.read_text(encoding="utf-8"))
    try:
        return {name: CategoryInfo.model_validate(item) for name, item in data["categories"].items()}
    except (ValidationError, KeyError, TypeError) as exc:
        raise DoctorError(f"doctor categories.yaml: {exc}", fix="Fix categories.yaml.") from exc


def _check_unique(rules: list[Rule]) -> None:
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise DoctorError(f"doctor rules: duplicate rule id {r.id!r}", fix="Give each rule its own id.")
        seen.add(r.id)
    known = seen
    for r in rules:
        for s in r.supersedes:
            if s not in known:
                raise DoctorError(f"doctor rules: {r.id} supersedes unknown rule {s!r}",
                                  fix="Name an existing rule id under 'supersedes'.")
