"""Whom to talk to: one Target for every command that reaches a served model (chat, check, bench, status).

A Target is built from a run record (what ``up`` started: endpoint, served name, recipe, launch, pins) or from
a bare URL (what the user passed). ``None`` means unknown. Building one makes no request; the API key is
resolved here, once, through :func:`forklift.endpoint.auth.api_key`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from forklift.endpoint.auth import api_key as read_api_key
from forklift.endpoint.auth import bearer
from forklift.errors import EndpointError

if TYPE_CHECKING:
    from forklift.recipe.schema import Capabilities
    from forklift.record import RunRecord

# Recipe fields whose difference can change greedy output; check's parity names the ones that differ.
SETTING_PATHS: tuple[str, ...] = (
    "model.source", "model.revision", "model.load_format", "serve.dtype", "serve.quantization",
    "serve.kv_cache_dtype", "serve.enforce_eager", "serve.block_size", "serve.max_num_batched_tokens",
    "serve.max_num_seqs", "serve.seed", "serve.speculative", "serve.extra_args", "parallel.tp", "parallel.pp",
    "parallel.dp", "parallel.dcp", "parallel.backend", "parallel.pp_layer_partition", "patches",
)
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json")


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible server and what is known about the deployment behind it."""

    base_url: str
    """Without ``/v1``."""
    model: str | None = None
    """The served name; None until discovery picks the only one."""
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    max_model_len: int | None = None
    """The expected context (the recipe's, or what the user passed); the server's own is in Discovery."""
    tokenizer: str | None = None
    """A tokenizer the user named (path or hub id), loaded with transformers."""
    model_path: str | None = None
    """Where the run's weights are; their tokenizer is used when the files are on this machine."""
    run_name: str | None = None
    bind_host: str | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool | None = None
    settings: dict[str, Any] | None = None
    """Settings that can change greedy output (record targets only), flattened: ``serve.enforce_eager: true``."""
    capabilities: Capabilities | None = None
    """What the recipe says the model can do (record targets only); None: unknown, every probe applies."""
    record: RunRecord | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_url(cls, url: str, *, model: str | None = None, api_key_env: str | None = None,
                 max_model_len: int | None = None, tokenizer: str | None = None,
                 environ: Mapping[str, str] | None = None) -> Target:
        """A server known only by its URL (and whatever the user told us)."""
        key = read_api_key(api_key_env, environ=environ, who=f"--api-key-env {api_key_env}")
        return cls(base_url=normalize_url(url), model=model, api_key=key, api_key_env=api_key_env,
                   max_model_len=max_model_len, tokenizer=tokenizer)

    @classmethod
    def from_record(cls, record: RunRecord, *, model: str | None = None, api_key_env: str | None = None,
                    max_model_len: int | None = None, tokenizer: str | None = None,
                    environ: Mapping[str, str] | None = None) -> Target:
        """The deployment a run record describes; the keyword arguments override what it says."""
        serve = record.recipe.serve
        var = api_key_env or serve.api_key_env
        return cls(
            base_url=normalize_url(record.endpoint),
            model=model or record.served_name,
            api_key=read_api_key(var, environ=environ, who=f"run '{record.name}'"),
            api_key_env=var,
            max_model_len=max_model_len or serve.max_model_len,
            tokenizer=tokenizer,
            model_path=record.launch.head.model_path or record.launch.model_path,
            run_name=record.name,
            bind_host=serve.host,
            reasoning_parser=serve.reasoning_parser,
            tool_call_parser=serve.tool_call_parser,
            enable_auto_tool_choice=serve.enable_auto_tool_choice,
            settings=settings_of(record.recipe.model_dump(mode="json"), record.pins.vllm_version),
            capabilities=record.recipe.model.capabilities,
            record=record,
        )

    def with_model(self, model: str) -> Target:
        return replace(self, model=model)

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.api_key)

    def describe(self) -> dict[str, Any]:
        """The target as shown in reports (never the key itself)."""
        return {"run": self.run_name, "base_url": self.base_url, "model": self.model,
                "max_model_len": self.max_model_len, "api_key_env": self.api_key_env,
                "reasoning_parser": self.reasoning_parser, "tool_call_parser": self.tool_call_parser,
                "settings": self.settings,
                "capabilities": self.capabilities.model_dump() if self.capabilities is not None else None}

    @property
    def where(self) -> str:
        """How messages name it: ``run 'demo' (http://...)`` or the URL."""
        return f"run '{self.run_name}' ({self.base_url})" if self.run_name else self.base_url

    @property
    def reach_fix(self) -> str:
        if self.run_name:
            return f"Is it running? `forklift status {self.run_name}`; start it with `forklift up`."
        return "Check the URL and port, and that the server is up (curl URL/v1/models)."

    @property
    def exposed(self) -> bool:
        """Whether the server listens beyond loopback (known for record targets, guessed from the URL otherwise)."""
        host = self.bind_host or httpx.URL(self.base_url).host
        if host in ("localhost", ""):
            return False
        try:
            return not ipaddress.ip_address(host).is_loopback
        except ValueError:
            return True

    @property
    def local_tokenizer(self) -> str | None:
        """The tokenizer to load with transformers: the one the user named, else the run's weights when their
        tokenizer files are on this machine; None means ask the server (``/tokenize``)."""
        if self.tokenizer:
            return self.tokenizer
        if self.model_path and any((Path(self.model_path).expanduser() / f).is_file() for f in TOKENIZER_FILES):
            return str(Path(self.model_path).expanduser())
        return None


def normalize_url(url: str) -> str:
    """``http://h:8000/v1/`` and ``h:8000`` both become ``http://h:8000``."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise EndpointError(f"not an http(s) URL: {url!r} ({exc})",
                            fix="Pass http://HOST:PORT (the server's base URL).") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise EndpointError(f"not an http(s) URL: {url!r}", fix="Pass http://HOST:PORT (the server's base URL).")
    path = parsed.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return str(parsed.copy_with(path=path or "", query=None, fragment=None)).rstrip("/")


def _dig(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def base_version(version: str | None) -> str | None:
    """``0.32.0+cpu`` -> ``0.32.0``: what vLLM's /version reports, so the two sources compare."""
    return version.split("+")[0] if version else None


def settings_of(recipe: Mapping[str, Any], vllm_version: str | None) -> dict[str, Any]:
    """The settings that can change greedy output, flattened (``serve.enforce_eager: true``)."""
    out = {path: _dig(recipe, path) for path in SETTING_PATHS}
    nodes = recipe.get("nodes") or []
    out["nodes"] = len(nodes)
    out["hardware"] = sorted({str(n.get("hardware")) for n in nodes if isinstance(n, Mapping)})
    out["vllm_version"] = base_version(vllm_version)
    return out
