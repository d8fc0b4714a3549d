"""The one place forklift reads an API key: from the environment variable a recipe or flag names."""

from __future__ import annotations

import os
from collections.abc import Mapping

from forklift.errors import ApiKeyMissingError
from forklift.names import ENV_NAME


def api_key(var: str | None, *, environ: Mapping[str, str] | None = None, who: str = "this run") -> str | None:
    """The key in ``$var`` (None when no variable is named). Raises ApiKeyMissingError when it is named but
    unset or empty: a request without it would only come back 401."""
    if var is None:
        return None
    if not ENV_NAME.fullmatch(var):
        raise ApiKeyMissingError(f"{who}: {var!r} is not an environment variable name",
                                 fix="Name the variable that holds the key (e.g. --api-key-env MY_KEY), not the key "
                                     "itself.")
    value = (os.environ if environ is None else environ).get(var)
    if not value:
        raise ApiKeyMissingError(f"{who} needs an API key from ${var}, which is not set here",
                                 fix=f"export {var}=<the key> and run the command again.")
    return value


def bearer(key: str | None) -> dict[str, str]:
    """The Authorization header for ``key`` (none without a key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}
