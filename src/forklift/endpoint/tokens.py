"""Counting exactly in the model's tokens: the model's own tokenizer (transformers) when its files are on this
machine or the user named one, else the server's ``/tokenize`` and ``/detokenize``.

``check``'s needle prompts and ``bench``'s fixed-length prompts both go through :func:`tokenizer_for`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from forklift.endpoint.client import Endpoint
from forklift.endpoint.target import Target
from forklift.errors import EndpointError

Messages = list[dict[str, str]]


class Tokenizer(Protocol):
    """What prompt builders need. ``special`` adds the tokens the server adds to a prompt (BOS, ...)."""

    source: str

    def encode(self, text: str, *, special: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def count_chat(self, messages: Messages) -> int:
        """Prompt tokens of a chat request, chat template and generation prompt included."""
        ...


class ServerTokenizer:
    """vLLM's /tokenize and /detokenize: the server's own tokenizer and chat template."""

    source = "server /tokenize"

    def __init__(self, endpoint: Endpoint, model: str) -> None:
        self.endpoint = endpoint
        self.model = model

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        data = self.endpoint.tokenize({"model": self.model, "prompt": text, "add_special_tokens": special})
        return [int(t) for t in data["tokens"]]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.endpoint.detokenize({"model": self.model, "tokens": list(ids)})["prompt"])

    def count_chat(self, messages: Messages) -> int:
        data = self.endpoint.tokenize({"model": self.model, "messages": messages, "add_generation_prompt": True})
        return int(data["count"])


class LocalTokenizer:
    """The model's tokenizer via transformers, from a local path (or a hub id already in the cache)."""

    def __init__(self, source: str) -> None:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is a dependency of vllm
            raise EndpointError("transformers is not installed, so no local tokenizer",
                                fix="pip install transformers, or count with the server's /tokenize.") from exc
        try:
            self.tok: Any = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as exc:
            raise EndpointError(f"cannot load the tokenizer from {source}: {exc}",
                                fix="Pass --tokenizer PATH to a model directory with tokenizer files.") from exc
        self.source = f"local tokenizer {source}"

    def encode(self, text: str, *, special: bool = False) -> list[int]:
        return [int(t) for t in self.tok(text, add_special_tokens=special)["input_ids"]]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tok.decode(list(ids)))

    def count_chat(self, messages: Messages) -> int:
        ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return len(ids)


def server_tokenizer(endpoint: Endpoint, model: str) -> ServerTokenizer | None:
    """The server's tokenizer if its /tokenize answers for ``model``, else None."""
    try:
        data = endpoint.tokenize({"model": model, "prompt": "probe"})
    except EndpointError:
        return None
    return ServerTokenizer(endpoint, model) if isinstance(data.get("tokens"), list) else None


def tokenizer_for(endpoint: Endpoint, target: Target, model: str) -> Tokenizer | None:
    """The one rule: transformers when the user named a tokenizer or the run's tokenizer files are on this
    machine (a named one that does not load raises EndpointError); else the server's /tokenize; else None."""
    local = target.local_tokenizer
    if local is not None:
        return LocalTokenizer(local)
    return server_tokenizer(endpoint, model)
