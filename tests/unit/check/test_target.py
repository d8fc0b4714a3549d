"""Targets: URLs, keys from the environment, tiers."""

from __future__ import annotations

import pytest

from forklift import check
from forklift.check.target import Target, normalize_url
from forklift.errors import CheckError


@pytest.mark.parametrize(("given", "base"), [
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("https://host.example/api/v1", "https://host.example/api"),
])
def test_normalize_url(given: str, base: str) -> None:
    assert normalize_url(given) == base


def test_not_http() -> None:
    with pytest.raises(CheckError, match="not an http"):
        normalize_url("ftp://x")


def test_api_key_env_must_be_set() -> None:
    with pytest.raises(CheckError) as err:
        check.from_url("http://127.0.0.1:1", api_key_env="FORKLIFT_TEST_KEY", environ={})
    assert err.value.fix == "export FORKLIFT_TEST_KEY=<the key> and run the check again."
    t = check.from_url("http://127.0.0.1:1", api_key_env="K", environ={"K": "s3cret"})
    assert t.api_key == "s3cret" and "s3cret" not in str(t.describe())


def test_exposed() -> None:
    assert not Target("http://127.0.0.1:8000").exposed
    assert not Target("http://localhost:8000").exposed
    assert Target("http://10.0.0.5:8000").exposed
    assert Target("http://127.0.0.1:8000", bind_host="0.0.0.0").exposed


def test_tiers() -> None:
    plain = Target("http://x", model="m")
    assert check.plan(plain, "quick") == ["endpoint", "completion", "streaming", "tools", "auth"]
    thinking = Target("http://x", model="m", reasoning_parser="glm45")
    assert check.plan(thinking, "quick") == ["endpoint", "completion", "streaming", "reasoning", "tools", "auth"]
    assert check.plan(plain, "full") == list(check.CHECK_IDS)
    assert check.plan(plain, "full", ["needle", "endpoint"]) == ["endpoint", "needle"]


def test_all_is_sorted() -> None:
    assert check.__all__ == sorted(check.__all__)
