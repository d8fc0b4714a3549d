"""Targets: URLs, the key from the environment, what a run record tells, exposure."""

from __future__ import annotations

import pytest

from forklift import endpoint
from forklift.endpoint import Target, normalize_url
from forklift.errors import ApiKeyMissingError, EndpointError
from forklift.launch.render import render
from forklift.plan import for_launch
from forklift.record import RunRecord


@pytest.mark.parametrize(("given", "base"), [
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("https://host.example/api/v1", "https://host.example/api"),
])
def test_normalize_url(given: str, base: str) -> None:
    assert normalize_url(given) == base


@pytest.mark.parametrize("bad", ["ftp://x", "http://", "http://[::1"])
def test_not_http(bad: str) -> None:
    with pytest.raises(EndpointError, match="not an http"):
        normalize_url(bad)


def test_exposed() -> None:
    assert not Target("http://127.0.0.1:8000").exposed
    assert not Target("http://localhost:8000").exposed
    assert Target("http://10.0.0.5:8000").exposed
    assert Target("http://127.0.0.1:8000", bind_host="0.0.0.0").exposed


def _record(**serve: object) -> RunRecord:
    from forklift import recipe as recipes

    r = recipes.load("default")
    r = r.model_copy(update={"serve": r.serve.model_copy(update=serve)})
    plan = for_launch(r, force=True)
    launch = render(plan)
    return RunRecord(name="demo", run_id="r1", plan=plan, launch=launch, endpoint=launch.endpoint + "/v1",
                     served_name=launch.served_name)


def test_from_record_reads_the_recipe_launch_and_pins() -> None:
    rec = _record(api_key_env="FK_KEY", reasoning_parser="qwen3", max_model_len=2048, host="0.0.0.0")
    rec.pins.vllm_version = "0.32.0+cpu"
    t = Target.from_record(rec, environ={"FK_KEY": "k1"})
    assert (t.base_url, t.model, t.run_name) == (rec.launch.endpoint, rec.served_name, "demo")
    assert (t.api_key, t.api_key_env, t.max_model_len, t.reasoning_parser) == ("k1", "FK_KEY", 2048, "qwen3")
    assert t.model_path == rec.launch.head.model_path and t.exposed and t.record is rec
    assert t.settings is not None and t.settings["vllm_version"] == "0.32.0"
    assert t.settings["serve.enforce_eager"] == rec.recipe.serve.enforce_eager
    assert t.where == f"run 'demo' ({rec.launch.endpoint})"
    over = Target.from_record(rec, model="other", api_key_env="OTHER", max_model_len=512, environ={"OTHER": "k2"})
    assert (over.model, over.api_key, over.max_model_len) == ("other", "k2", 512)
    with pytest.raises(ApiKeyMissingError, match="run 'demo' needs an API key from \\$FK_KEY"):
        Target.from_record(rec, environ={})


def test_all_is_sorted_and_importable() -> None:
    assert endpoint.__all__ == sorted(endpoint.__all__)
    for name in endpoint.__all__:
        assert getattr(endpoint, name) is not None, name
