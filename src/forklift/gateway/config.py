"""The proxy's configuration, from the run records: each run's served name maps to its endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from forklift.errors import GatewayError
from forklift.record import RunRecord

HOOKS = "forklift_gateway_hooks"


@dataclass(frozen=True)
class Backend:
    model: str
    run: str
    endpoint: str
    api_key_env: str | None


def backends(records: list[RunRecord]) -> list[Backend]:
    """One backend per run; two runs under one served name are refused (the gateway routes by name)."""
    out: dict[str, Backend] = {}
    for r in records:
        if r.served_name in out:
            raise GatewayError(f"runs {out[r.served_name].run!r} and {r.name!r} both serve {r.served_name!r}",
                               fix="Give one of them another model.served_name (the gateway routes by name).")
        out[r.served_name] = Backend(r.served_name, r.name, r.endpoint, r.recipe.serve.api_key_env)
    return list(out.values())


def litellm_config(found: list[Backend]) -> dict[str, Any]:
    """LiteLLM proxy config: no retries, no cooldowns (a down run is answered 503 by the hooks from its state,
    and serves again as soon as its run does), forklift's key check and audit logger."""
    return {
        "model_list": [{"model_name": b.model,
                        "litellm_params": {"model": f"hosted_vllm/{b.model}", "api_base": f"{b.endpoint}/v1",
                                           "api_key": f"os.environ/{b.api_key_env}" if b.api_key_env else "none"},
                        "model_info": {"forklift_run": b.run}} for b in found],
        "router_settings": {"num_retries": 0, "disable_cooldowns": True},
        "litellm_settings": {"num_retries": 0, "request_timeout": 600, "drop_params": False,
                             "callbacks": f"{HOOKS}.logger", "telemetry": False},
        "general_settings": {"custom_auth": f"{HOOKS}.user_api_key_auth",
                             "master_key": "os.environ/LITELLM_MASTER_KEY"},
    }
