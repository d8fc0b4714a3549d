"""Talking to a served model: one Endpoint client, API-key resolution, the SSE reader."""

from forklift.endpoint.auth import api_key, bearer
from forklift.endpoint.client import Endpoint
from forklift.endpoint.sse import delta_text, events

__all__ = ["Endpoint", "api_key", "bearer", "delta_text", "events"]
