"""Reading the YAML data files forklift ships (architectures, quantization formats, vLLM rules, hardware profiles,
patch catalog, doctor rules): libyaml's C loader when PyYAML was built with it, else PyYAML's own.

The C loader parses these files about ten times faster, which is most of a cold ``forklift plan``. Recipes and
other user files keep ``yaml.safe_load`` (its error messages are the ones the recipe errors quote).
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from ruamel.yaml import YAML

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_data(text: str) -> Any:
    """One YAML document from a file forklift ships, with a safe loader."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (libyaml's or PyYAML's)


def shipped(package: str, name: str) -> Any:
    """``package``'s ``data/NAME`` (a YAML file forklift ships), read with ``load_data``."""
    return load_data((resources.files(package) / "data" / name).read_text())


class _UserLoader(yaml.SafeLoader):
    """Recipes, cluster files and ``--set`` values: PyYAML's safe loader, except that an unquoted date stays the
    text it was written as (a revision or a tag, never a ``datetime`` that no JSON or pydantic field takes)."""


_UserLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_PLAIN = (str, int, float, bool, type(None))


def load_user(text: str) -> Any:
    """One YAML document a user wrote. Raises ``yaml.YAMLError`` for bad syntax and ``ValueError`` naming the key
    for a value JSON cannot hold (``!!binary``, ``!!set``, ``!!timestamp``...)."""
    data = yaml.load(text, Loader=_UserLoader)  # noqa: S506 - a SafeLoader subclass
    check_plain(data)
    return data


def check_plain(data: Any, where: str = "") -> None:
    """Raise ValueError naming the first key path whose value is not JSON data (mapping, list, text, number)."""
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, _PLAIN):
                raise ValueError(f"{where or '(top level)'}: a key of type {type(key).__name__} is not allowed")
            check_plain(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_plain(value, f"{where}.{i}" if where else str(i))
    elif not isinstance(data, _PLAIN):
        raise ValueError(f"{where or '(top level)'}: a YAML {type(data).__name__} value is not allowed here; "
                         "write it as quoted text")


def round_trip(text: str) -> YAML:
    """A ruamel round-trip YAML for rewriting ``text`` in place (``net apply``, ``tune --apply``): quotes and
    comments kept, no line folding, and the file's own sequence indentation (``- `` under its key or indented)."""
    import re

    from ruamel.yaml import YAML  # only the commands that rewrite a file pay for the import

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    dash = re.search(r"^( *)- ", text, re.MULTILINE)
    offset = len(dash.group(1)) if dash else 0
    y.indent(mapping=2, sequence=2 + offset, offset=offset)
    return y
