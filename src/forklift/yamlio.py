"""Reading the YAML data files forklift ships (architectures, quantization formats, vLLM rules, hardware profiles,
patch catalog, doctor rules): libyaml's C loader when PyYAML was built with it, else PyYAML's own.

The C loader parses these files about ten times faster, which is most of a cold ``forklift plan``. Recipes and
other user files keep ``yaml.safe_load`` (its error messages are the ones the recipe errors quote).
"""

from __future__ import annotations

from typing import Any

import yaml

_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_data(text: str) -> Any:
    """One YAML document from a file forklift ships, with a safe loader."""
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (libyaml's or PyYAML's)
