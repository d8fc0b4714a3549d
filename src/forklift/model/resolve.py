"""Turn a recipe's ``model.source`` into a local directory (no downloads, ever)."""

from __future__ import annotations

from pathlib import Path

from forklift.errors import ModelNotFoundError
from forklift.model import bundled
from forklift.recipe.schema import ModelSection


def hf_cache_path(repo_id: str, revision: str | None = None) -> Path | None:
    """The snapshot dir of a Hugging Face id in the local HF cache, or None."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception:  # LocalEntryNotFoundError and friends: simply "not cached"
        return None


def local_path(model: ModelSection, *, prepare_bundled: bool = False) -> Path:
    """The directory holding config.json for this model on this machine."""
    if model.is_bundled:
        name = model.bundled_name
        bundled.get(name)
        if not bundled.is_prepared(name):
            if not prepare_bundled:
                raise ModelNotFoundError(
                    f"bundled model '{name}' is not prepared yet",
                    fix=f"Run `forklift model prepare bundled:{name}` (up does this by itself).",
                )
            bundled.prepare(name)
        return bundled.target_dir(name)
    path = Path(model.source).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"model path {path} has no config.json",
                fix="Point model.source at the directory holding config.json and the weights.",
            )
        return path.resolve()
    looks_like_path = model.source.startswith(("/", ".", "~")) or model.source.count("/") != 1
    if not looks_like_path:
        cached = hf_cache_path(model.source, model.revision)
        if cached is not None:
            return cached
        raise ModelNotFoundError(
            f"model '{model.source}' is not in the local Hugging Face cache and forklift never downloads",
            fix=f"Download it yourself (`huggingface-cli download {model.source}`) or set model.source to a path.",
        )
    raise ModelNotFoundError(
        f"model path {path} does not exist",
        fix="Fix model.source in the recipe, or copy the model there (`forklift model sync` for nodes).",
    )
