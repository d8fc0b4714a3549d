"""The gateway: one OpenAI-compatible endpoint (LiteLLM's proxy) in front of runs, with a key per person (stored
hashed), per-key model allow-lists and rate limits, a 503 with the run's state for a model whose run is down,
usage per key and a local audit log."""

from forklift.gateway.config import Backend, backends, litellm_config
from forklift.gateway.keys import KeyEntry, add, gateway_dir, load_keys, revoke
from forklift.gateway.ops import (
    GatewayState,
    down,
    gateway_status,
    health,
    load_state,
    serve,
    state_path,
    up,
    watcher_argv,
)
from forklift.gateway.usage import KeyUsage, audit_entries, usage

__all__ = ["Backend", "GatewayState", "KeyEntry", "KeyUsage", "add", "audit_entries", "backends", "down",
           "gateway_dir", "gateway_status", "health", "litellm_config", "load_keys", "load_state", "revoke", "serve",
           "state_path", "up", "usage", "watcher_argv"]
