"""The hooks' key check, run by the gateway's own Python (its venv has LiteLLM and FastAPI) on requests built as
LiteLLM's proxy hands them over: a key limited to some models cannot reach another one through a route whose model
LiteLLM takes from the path (/openai/deployments/{m}/..., /engines/{m}/...), nor through LiteLLM's admin API, nor
with a body that names no model; the admin key can."""

from __future__ import annotations

import json
import os
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from forklift import gateway
from forklift.gateway import keys
from tests.unit.gateway.test_hooks_rotation import PYTHON

pytestmark = pytest.mark.unit

_CALL = """
import asyncio, json, sys
from starlette.requests import Request
import forklift_gateway_hooks as h

def request(method, path, body):
    raw = body.encode()
    path, _, query = path.partition("?")
    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}
    return Request({"type": "http", "method": method, "path": path, "headers": [], "query_string": query.encode()},
                   receive)

async def main():
    out = []
    for key, method, path, body in json.loads(sys.argv[1]):
        try:
            who = await h.user_api_key_auth(request(method, path, body), "Bearer " + key)
            out.append(["allowed", who.key_alias])
        except Exception as exc:
            out.append([getattr(exc, "status_code", repr(exc)), str(getattr(exc, "detail", ""))])
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.mark.skipif(not PYTHON.exists(), reason="the gateway's venv is not here (`make fixtures` makes it)")
def test_a_limited_key_reaches_only_its_models_whatever_the_route() -> None:
    d = gateway.gateway_dir()
    d.mkdir(parents=True, exist_ok=True)
    (d / "forklift_gateway_hooks.py").write_text(
        resources.files("forklift.gateway.proxy").joinpath("forklift_gateway_hooks.py").read_text())
    _, alice = keys.add("alice", models=["small"])
    admin = "fk-admin-test"
    (d / "admin.sha256").write_text(keys.digest(admin))
    small, big = json.dumps({"model": "small"}), json.dumps({"model": "big"})
    cases = [
        (alice, "POST", "/v1/chat/completions", small),
        (alice, "POST", "/v1/chat/completions", big),
        (alice, "POST", "/openai/deployments/big/chat/completions", small),
        (alice, "POST", "/engines/big/chat/completions", "{}"),
        (alice, "POST", "/v1/chat/completions", "{}"),
        (alice, "POST", "/v1/chat/completions", "not json"),
        (alice, "GET", "/key/list", ""),
        (alice, "GET", "/v1/models", ""),
        (admin, "POST", "/openai/deployments/big/chat/completions", small),
        (alice, "POST", "/v1/chat/completions?model=big", small),  # LiteLLM takes ?model= over the body's
    ]
    env = {**os.environ, "FORKLIFT_GATEWAY_DIR": str(d), "PYTHONPATH": str(d)}
    res = subprocess.run([str(PYTHON), "-c", _CALL, json.dumps(cases)], env=env, capture_output=True, text=True,
                         timeout=300, check=False, cwd=str(Path(d)))
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got[0] == ["allowed", "alice"]
    assert got[1][0] == 403 and "may not use model 'big'" in got[1][1]
    assert got[2][0] == 403 and "/openai/deployments/big/chat/completions" in got[2][1]  # the path's model
    assert got[3][0] == 403 and "/engines/big/chat/completions" in got[3][1]
    assert got[4][0] == 400 and "\"model\"" in got[4][1]  # no model named: LiteLLM would pick one itself
    assert got[5][0] == 400
    assert got[6][0] == 403  # LiteLLM's admin API
    assert got[7] == ["allowed", "alice"]
    assert got[8] == ["allowed", "forklift-admin"]
    assert got[9][0] == 400 and "query string" in got[9][1]
