"""Counting exactly in the model's tokens: the server's /tokenize when it has one, else the local tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

Messages = list[dict[str, str]]


class Tokenizer(Protocol):
    """What the needle check needs from a tokenizer."""

    source: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def count_chat(self, messages: Messages) -> int:
        """Prompt tokens of a chat request, chat template and generation prompt included."""
        ...


class ServerTokenizer:
    """vLLM's /tokenize and /detokenize: the server's own tokenizer and chat template."""

    source = "server /tokenize"

    def __init__(self, http: httpx.Client, model: str) -> None:
        self.http = http
        self.model = model

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = self.http.post(path, json={"model": self.model, **body})
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()
        return data

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self._post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._post("/detokenize", {"tokens": list(ids)})["prompt"])

    def count_chat(self, messages: Messages) -> int:
        return int(self._post("/tokenize", {"messages": messages, "add_generation_prompt": True})["count"])


class LocalTokenizer:
    """The tokenizer beside the weights (transformers), for servers without /tokenize."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self.tok: Any = AutoTokenizer.from_pretrained(path)
        self.source = f"local tokenizer {path}"

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self.tok.encode(text, add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tok.decode(list(ids)))

    def count_chat(self, messages: Messages) -> int:
        ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return len(ids)


def tokenizer_for(http: httpx.Client, model: str, model_path: str | None) -> Tokenizer | None:
    """The server's tokenizer if /tokenize answers, else the local one if the weights are here, else None."""
    try:
        resp = http.post("/tokenize", json={"model": model, "prompt": "probe"})
        if resp.status_code == 200 and isinstance(resp.json().get("tokens"), list):
            return ServerTokenizer(http, model)
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    if model_path and (Path(model_path) / "tokenizer_config.json").is_file():
        return LocalTokenizer(model_path)
    return None
