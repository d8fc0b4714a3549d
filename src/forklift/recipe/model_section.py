"""The recipe's ``model:`` section: which weights to serve, and what the model can do."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from forklift.recipe.strict import OneLine, Strict

BUNDLED_PREFIX = "bundled:"


def is_hub_id(source: str) -> bool:
    """``org/name`` (one slash, not a path, not bundled): a Hugging Face id."""
    return (source.count("/") == 1 and not source.startswith((".", "/", "~", BUNDLED_PREFIX))
            and ":" not in source)


class Capabilities(Strict):
    """What the model itself can do, as the recipe's author knows it. ``check`` skips or warns (with this field as
    the reason) instead of failing a probe the model is too small for; a server fault still fails."""

    tools: bool = Field(
        default=True, description="Follows a tool's JSON schema under named or required tool choice (check: tools, "
        "and integrity's tool scenarios).",
    )
    exact_answers: bool = Field(
        default=True, description="Answers small arithmetic, a few well-known facts and a JSON-mode question "
        "exactly (check: integrity's exact-answer probes).",
    )
    multilingual: bool = Field(
        default=True, description="Writes Chinese, Korean and Russian text (check: integrity's U+FFFD probes in "
        "those scripts; Latin is always probed).",
    )
    long_generation: bool = Field(
        default=True, description="Writes a long greedy text without looping (check: integrity's repetition "
        "probe).",
    )


class ModelSection(Strict):
    """Which weights to serve."""

    source: OneLine = Field(
        description="A local path, a Hugging Face id (org/name, read from the local HF cache), "
        "or 'bundled:NAME' for a model forklift ships."
    )
    served_name: OneLine | None = Field(
        default=None, description="Name clients use in requests; default: the last part of source."
    )
    path: OneLine | None = Field(
        default=None,
        description="Where the weights are on every node (a host path; '~' is that node's home). Default: "
        "model.source when it is a path; for a Hugging Face id, the node's Hugging Face cache (vLLM reads it "
        "offline there). A node's own `model_path` wins over this.",
    )
    revision: OneLine | None = Field(default=None, description="Hugging Face revision, for hub ids.")
    tokenizer: OneLine | None = Field(default=None, description="Tokenizer path/id if not beside the weights.")
    load_format: Literal["auto", "safetensors", "dummy", "gguf"] = Field(
        default="auto", description="'dummy' loads random weights from config.json alone (testing, sizing)."
    )
    trust_remote_code: bool = False
    config: OneLine | None = Field(
        default=None, description="For planning: a bundled config name (`forklift plan --list-configs`) or a "
        "path to config.json, when the weights are not on this machine.",
    )
    capabilities: Capabilities = Field(
        default_factory=Capabilities, description="What the model can do (default: everything `check` probes); "
        "`check` skips or warns, naming this field, where it is false.",
    )

    @field_validator("source")
    @classmethod
    def _source_not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @property
    def is_bundled(self) -> bool:
        return self.source.startswith(BUNDLED_PREFIX)

    @property
    def is_hub_id(self) -> bool:
        """``org/name`` that is not a path: vLLM resolves it from the node's Hugging Face cache."""
        return is_hub_id(self.source)

    @property
    def bundled_name(self) -> str:
        return self.source[len(BUNDLED_PREFIX) :]

    def default_served_name(self) -> str:
        if self.served_name:
            return self.served_name
        tail = self.source.rstrip("/").split("/")[-1]
        return tail.split(":")[-1]
