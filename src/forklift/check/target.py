"""What ``check`` runs against: a base URL and model, plus what the run record knows about the deployment."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from forklift.errors import CheckError, RunError
from forklift.record import RunRecord

# Recipe fields whose difference can change greedy output; parity names the ones that differ.
SETTING_PATHS: tuple[str, ...] = (
    "model.source", "model.revision", "model.load_format", "serve.dtype", "serve.quantization",
    "serve.kv_cache_dtype", "serve.enforce_eager", "serve.block_size", "serve.max_num_batched_tokens",
    "serve.max_num_seqs", "serve.seed", "serve.speculative", "serve.extra_args", "parallel.tp", "parallel.pp",
    "parallel.dp", "parallel.dcp", "parallel.backend", "parallel.pp_layer_partition", "patches",
)


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible endpoint to check.

    ``None`` means unknown: the URL form knows only what the user passed; the record form knows the recipe.
    """

    base_url: str
    model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    max_model_len: int | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool | None = None
    model_path: str | None = None
    run_name: str | None = None
    bind_host: str | None = None
    settings: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        """The target as shown in reports (never the key itself)."""
        return {"run": self.run_name, "base_url": self.base_url, "model": self.model,
                "max_model_len": self.max_model_len, "api_key_env": self.api_key_env,
                "reasoning_parser": self.reasoning_parser, "tool_call_parser": self.tool_call_parser,
                "settings": self.settings}

    def with_model(self, model: str) -> Target:
        return replace(self, model=model)

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


def normalize_url(url: str) -> str:
    """``http://h:8000/v1/`` and ``h:8000`` both become ``http://h:8000``."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parsed = httpx.URL(text)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise CheckError(f"not an http(s) URL: {url!r}", fix="Pass --url http://HOST:PORT (the server's base URL).")
    path = parsed.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return str(parsed.copy_with(path=path or "", query=None, fragment=None)).rstrip("/")


def _key_from_env(var: str | None, environ: Mapping[str, str], who: str) -> str | None:
    if var is None:
        return None
    value = environ.get(var)
    if not value:
        raise CheckError(f"{who} needs an API key from ${var}, which is not set here",
                         fix=f"export {var}=<the key> and run the check again.")
    return value


def _dig(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def settings_of(recipe: Mapping[str, Any], vllm_version: str | None) -> dict[str, Any]:
    """The settings that can change greedy output, flattened (``serve.enforce_eager: true``)."""
    out = {path: _dig(recipe, path) for path in SETTING_PATHS}
    nodes = recipe.get("nodes") or []
    out["nodes"] = len(nodes)
    out["hardware"] = sorted({str(n.get("hardware")) for n in nodes if isinstance(n, Mapping)})
    out["vllm_version"] = base_version(vllm_version)
    return out


def base_version(version: str | None) -> str | None:
    """``0.32.0+cpu`` -> ``0.32.0``: what vLLM's /version reports, so the two sources compare."""
    return version.split("+")[0] if version else None


def from_record(record: RunRecord, *, api_key_env: str | None = None,
                environ: Mapping[str, str] | None = None) -> Target:
    """The target a run record describes; ``api_key_env`` overrides the record's."""
    env = os.environ if environ is None else environ
    serve = record.recipe.serve
    var = api_key_env or record.api_key_env
    return Target(
        base_url=normalize_url(record.endpoint),
        model=record.served_name,
        api_key=_key_from_env(var, env, f"run '{record.name}'"),
        api_key_env=var,
        max_model_len=serve.max_model_len,
        reasoning_parser=serve.reasoning_parser,
        tool_call_parser=serve.tool_call_parser,
        enable_auto_tool_choice=serve.enable_auto_tool_choice,
        model_path=record.launch.model_path,
        run_name=record.name,
        bind_host=serve.host,
        settings=settings_of(record.recipe.model_dump(mode="json"), record.vllm_version),
    )


def from_url(url: str, *, model: str | None = None, api_key_env: str | None = None,
             max_model_len: int | None = None, environ: Mapping[str, str] | None = None) -> Target:
    """A target known only by its URL (and whatever the user told us)."""
    env = os.environ if environ is None else environ
    return Target(base_url=normalize_url(url), model=model,
                  api_key=_key_from_env(api_key_env, env, f"--api-key-env {api_key_env}"),
                  api_key_env=api_key_env, max_model_len=max_model_len)


def reference_from(value: str, *, api_key_env: str | None = None) -> Path | Target:
    """``--reference``: a transcript file, a URL, or the name of another run."""
    from forklift import record as records

    path = Path(value).expanduser()
    if path.is_file():
        return path
    if value.startswith(("http://", "https://")):
        return from_url(value, api_key_env=api_key_env)
    try:
        rec = records.load(value)
    except RunError as exc:
        raise CheckError(f"--reference {value!r} is not a file, a URL, or a run name",
                         fix="Pass a transcript written by --save-reference, http://HOST:PORT, or a run from "
                             "`forklift status`.") from exc
    return from_record(rec, api_key_env=api_key_env)
