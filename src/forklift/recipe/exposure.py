"""Who can reach the API: a server bound beyond loopback without an API key serves anyone on the network."""

from __future__ import annotations

import ipaddress

from forklift.recipe.schema import Recipe

FIX = ("Set serve.api_key_env to the name of a variable holding a key (clients then need it), or bind "
       "serve.host: 127.0.0.1 when only this machine should reach it.")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_without_key(recipe: Recipe) -> str | None:
    """The warning when the API listens beyond loopback with no key, else None."""
    serve = recipe.serve
    if serve.api_key_env or is_loopback(serve.host):
        return None
    return (f"serve.host {serve.host} listens beyond this machine and serve.api_key_env is not set: anyone who "
            f"reaches port {serve.port} can use the model")
