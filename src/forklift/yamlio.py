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
    text it was written as (a revision or a tag, never a ``datetime`` that no JSON or pydantic field takes), and a
    key written twice in one mapping is an error (PyYAML keeps the last silently: a second ``serve:`` dropped the
    first one's api_key_env). Keys a merge (``<<: *base``) brings in may still be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found the key {key!r} twice (first on line {seen[key] + 1}): write it once",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


_UserLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_PLAIN = (str, int, float, bool, type(None))
class TooManyValuesError(ValueError):
    """A document that expands past MAX_VALUES values."""


MAX_VALUES = 100_000
"""The most values a user's document may hold once its aliases are expanded (a 466-byte file of nested aliases
expands to hundreds of millions and would hang every walk over it)."""


def load_user(text: str) -> Any:
    """One YAML document a user wrote. Raises ``yaml.YAMLError`` for bad syntax and ``ValueError`` naming the key
    for a value JSON cannot hold (``!!binary``, ``!!set``, ``!!timestamp``...)."""
    data = yaml.load(text, Loader=_UserLoader)  # noqa: S506 - a SafeLoader subclass
    check_plain(data)
    return data


def check_plain(data: Any, where: str = "", _count: list[int] | None = None) -> None:
    """Raise ValueError naming the first key path whose value is not JSON data (mapping, list, text, number), or
    when the document holds more than ``MAX_VALUES`` values with its aliases expanded."""
    count = _count if _count is not None else [0]
    count[0] += 1
    if count[0] > MAX_VALUES:
        raise TooManyValuesError(f"{where or '(top level)'}: the document holds more than {MAX_VALUES:,} values once "
                                 "its YAML aliases (*name) are expanded; write the values out")
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, _PLAIN):
                raise ValueError(f"{where or '(top level)'}: a key of type {type(key).__name__} is not allowed")
            check_plain(value, f"{where}.{key}" if where else str(key), count)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            check_plain(value, f"{where}.{i}" if where else str(i), count)
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
