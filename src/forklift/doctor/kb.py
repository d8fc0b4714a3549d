"""The knowledge base: YAML rule files shipped beside this module, validated once when first used."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from forklift.doctor.model import CategoryInfo, Rule
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
                              fix="Correct that rule; see forklift/doctor/model.py for the fields.") from exc
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
    _check_unique(rules)
    return tuple(rules)


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
