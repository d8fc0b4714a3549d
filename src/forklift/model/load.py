"""Find a model's config.json for planning: model.config, the bundled model, a local dir, the HF cache,
or a config bundled with forklift for a known checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from forklift.errors import ModelError, ModelNotFoundError
from forklift.model import bundled, configs_index
from forklift.model.archrules import from_config
from forklift.model.configjson import load_config
from forklift.model.resolve import hf_cache_path
from forklift.model.spec import ModelSpec
from forklift.recipe.schema import ModelSection


class SpecSource(BaseModel):
    """Where the planner's config came from, and the checkpoint dir when weights are local."""

    model_config = ConfigDict(frozen=True)

    spec: ModelSpec
    origin: str
    checkpoint_dir: Path | None = None


def _from_bundled_config(name: str, entry: configs_index.BundledConfig) -> SpecSource:
    raw = json.loads(configs_index.read(entry))
    return SpecSource(spec=from_config(raw, name=name, source=f"bundled config {entry.name}"),
                      origin=f"bundled config '{entry.name}'")


def _from_dir(name: str, path: Path, origin: str) -> SpecSource:
    raw = load_config(path)
    return SpecSource(spec=from_config(raw, name=name, source=str(path / "config.json")), origin=origin,
                      checkpoint_dir=path)


def spec_for(model: ModelSection) -> SpecSource:
    """The ModelSpec for a recipe's model section; never downloads."""
    name = model.default_served_name()
    if model.config:
        entry = configs_index.find(model.config)
        if entry is not None:
            return _from_bundled_config(name, entry)
        path = Path(model.config).expanduser()
        if path.exists():
            raw = load_config(path)
            return SpecSource(spec=from_config(raw, name=name, source=str(path)), origin=str(path))
        known = ", ".join(sorted(configs_index.bundled_configs()))
        raise ModelNotFoundError(f"model.config '{model.config}' is neither a bundled config nor a file",
                                 fix=f"Use one of: {known}; or a path to config.json.")
    if model.is_bundled:
        target = bundled.target_dir(model.bundled_name)
        if (target / "config.json").is_file():
            return _from_dir(name, target, f"bundled model {model.bundled_name}")
        raise ModelNotFoundError(f"bundled model '{model.bundled_name}' is not prepared, so its config is not here",
                                 fix=f"Run `forklift model prepare {model.source}`.")
    path = Path(model.source).expanduser()
    if (path / "config.json").is_file():
        return _from_dir(name, path.resolve(), str(path))
    if model.source.count("/") == 1 and not model.source.startswith((".", "/", "~")):
        cached = hf_cache_path(model.source, model.revision)
        if cached is not None and (cached / "config.json").is_file():
            return _from_dir(name, cached, f"Hugging Face cache ({model.source})")
    entry = configs_index.find(model.source)
    if entry is not None:
        return _from_bundled_config(name, entry)
    known = ", ".join(sorted(configs_index.bundled_configs()))
    raise ModelNotFoundError(
        f"no config.json for '{model.source}' on this machine, and no bundled config matches it",
        fix=f"Set model.config to a bundled config ({known}) or to a path of the model's config.json.",
    )


def spec_from_file(path: Path, name: str | None = None) -> ModelSpec:
    try:
        raw = load_config(path)
    except ModelError:
        raise
    return from_config(raw, name=name or path.stem, source=str(path))
