"""Issue 26's smaller items, each as the user meets it through the CLI: YAML values JSON cannot hold, a server
open to the network without a key, the version flag, recipe listing and validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import forklift


@pytest.mark.parametrize("value", ["2024-01-01", "!!binary aGVsbG8=", "!!set {a: null}", "!!timestamp 2024-01-01"])
@pytest.mark.parametrize("command", ["plan", "render"])
def test_yaml_dates_and_tags_are_text_or_a_named_error_never_a_traceback(tmp_path: Path, value: str,
                                                                          command: str) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"extends: default\ndescription: {value}\n")
    res = forklift(command, str(recipe), "--json")
    assert "Traceback" not in res.stderr, res.stderr
    if value == "2024-01-01":  # an unquoted date is the text it was written as
        assert res.returncode == 0, res.stderr
    else:
        assert res.returncode == 2 and "description" in res.stderr and "quote" in res.stderr.lower()


def test_a_set_value_that_looks_like_a_date_stays_text() -> None:
    res = forklift("recipe", "show", "default", "--set", "description=2024-01-01", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["description"] == "2024-01-01"


@pytest.mark.parametrize("key", ["A=B", "-Sbash -c 'x' #", "A;B", "1A"])
def test_env_keys_that_are_not_names_are_recipe_errors(key: str) -> None:
    res = forklift("plan", "default", "--set", f"env={json.dumps({key: '1'})}")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "not an environment variable name" in res.stderr


def test_a_server_open_beyond_loopback_without_a_key_is_named_by_plan_and_render() -> None:
    sets = ["--set", "serve.host=0.0.0.0"]
    plan = json.loads(forklift("plan", "default", *sets, "--json").stdout)
    assert any("serve.api_key_env is not set" in n for n in plan["notes"])
    render = forklift("render", "default", *sets)
    assert render.returncode == 0 and "security" in render.stdout and "serve.api_key_env" in render.stdout
    keyed = json.loads(forklift("plan", "default", *sets, "--set", "serve.api_key_env=MY_KEY", "--json").stdout)
    assert not any("serve.api_key_env is not set" in n for n in keyed["notes"])
    local = json.loads(forklift("plan", "default", "--json").stdout)
    assert not any("security" in n for n in local["notes"])


def test_up_strict_refuses_an_open_server_before_starting_anything(tmp_path: Path) -> None:
    res = forklift("up", "default", "--name", "open", "--strict", "--set", "serve.host=0.0.0.0",
                   "--set", "serve.port=1", home=tmp_path)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "serve.api_key_env is not set" in res.stderr and "--strict" in res.stderr
    assert not list((tmp_path / "runs").glob("*/record.json"))


def test_version_flag() -> None:
    from forklift import __version__

    res = forklift("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"forklift {__version__}"


def test_recipe_list_shows_whole_names_on_an_80_column_terminal() -> None:
    from forklift.recipe import bundled_names

    res = forklift("recipe", "list", env={"COLUMNS": "80"})
    assert res.returncode == 0
    for name in bundled_names():
        assert name in res.stdout, name


def test_recipe_validate_exists_and_names_problems(tmp_path: Path) -> None:
    ok = forklift("recipe", "validate", "default")
    assert ok.returncode == 0 and "valid" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: default\nserve: {max_model_lenght: 4}\n")
    res = forklift("recipe", "validate", str(bad))
    assert res.returncode == 2 and "did you mean 'max_model_len'" in res.stderr
    help_text = forklift("recipe", "--help").stdout
    assert "validate" in help_text
