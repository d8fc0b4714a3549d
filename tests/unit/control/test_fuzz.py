"""Fuzzing what a user types: recipe files, --set values and command lines never end in a traceback.

Every generated input must either work or fail with forklift's own error (or typer's usage message): a
non-zero exit, no Python traceback, and the offending field, item or argument named.
"""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forklift import recipe as recipes
from forklift.cli.main import COMMANDS, main
from forklift.errors import ForkliftError, RecipeError

FIELDS = ["model", "model.source", "model.path", "serve", "serve.port", "serve.max_model_len",
          "serve.gpu_memory_utilization", "serve.kv_cache_dtype", "serve.speculative", "parallel.tp", "parallel.pp",
          "parallel.backend", "nodes", "nodes.0.ssh", "nodes.0.data_ip", "nodes.0.hardware", "runtime",
          "runtime.kind", "network.master_port", "patches", "env", "timeouts.ready_s", "cluster", "extends"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=False),
                    st.text(max_size=30))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["source", "port", "tp", "host", "kind", "x", "0"]), inner, max_size=3), max_leaves=8)
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
"""60 per test in CI; FUZZ_EXAMPLES=2000 for a longer hunt."""
SLOW = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _set_item(key: str, value: object) -> str:
    return f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"


@SLOW
@given(key=st.one_of(st.sampled_from(FIELDS), st.from_regex(r"[a-z_]{1,8}(\.[a-z0-9_]{1,8}){0,3}", fullmatch=True)),
       value=VALUES)
def test_set_values_work_or_name_the_item(key: str, value: object) -> None:
    item = _set_item(key, value)
    try:
        recipes.resolve("default", [item], facts=False)
    except RecipeError as exc:
        assert f"--set {item}" in str(exc) or item.partition("=")[0] in str(exc), str(exc)
        assert exc.fix


@SLOW
@given(data=st.dictionaries(st.sampled_from([f.split(".")[0] for f in FIELDS] + ["bogus", "servee"]), VALUES,
                            max_size=6))
def test_recipe_files_work_or_name_the_file_and_field(tmp_path: Path, data: dict[str, object]) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        recipes.resolve(str(path), facts=False)
    except ForkliftError as exc:
        assert isinstance(exc, RecipeError), repr(exc)
        # the file, or the extends: / cluster: it points to (named by what it is), and always a fix
        assert str(path) in str(exc) or "bundled:" in str(exc) or "extends" in str(exc) or "cluster" in str(exc)
        assert exc.fix


@SLOW
@given(raw=st.binary(max_size=400))
def test_any_bytes_as_a_recipe_file_are_a_recipe_error(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "bytes.yaml"
    path.write_bytes(raw)
    try:
        recipes.resolve(str(path), facts=False)
    except ForkliftError as exc:
        assert isinstance(exc, RecipeError), repr(exc)
        assert str(path) in str(exc) or "bundled:" in str(exc) or "extends" in str(exc) or "cluster" in str(exc)
        assert exc.fix


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["forklift", *argv]
    try:
        with redirect_stdout(out), redirect_stderr(err):
            main()
    except SystemExit as exc:
        return int(exc.code or 0), err.getvalue() + out.getvalue()
    finally:
        sys.argv = old
    return 0, err.getvalue() + out.getvalue()


@settings(max_examples=40, deadline=None)
@given(command=st.sampled_from(sorted(COMMANDS)),
       option=st.from_regex(r"--[a-z]{3,10}-zz", fullmatch=True))
def test_unknown_options_exit_2_naming_the_option(command: str, option: str) -> None:
    rc, text = _run([command, option])
    assert rc == 2, text
    assert option in text and "Traceback" not in text


@settings(max_examples=25, deadline=None)
@given(word=st.from_regex(r"[a-z][a-z0-9-]{2,12}", fullmatch=True).filter(lambda w: w not in COMMANDS))
def test_unknown_commands_exit_2(word: str) -> None:
    rc, text = _run([word])
    assert rc == 2 and word in text and "Traceback" not in text


@pytest.mark.parametrize("argv", [
    ["plan", "no-such-recipe-xyz"], ["render", "--set", "serve.port=abc"], ["plan", "--set", "noequals"],
    ["bench", "--input-len", "abc"], ["chat"], ["patch", "show"], ["node", "check", "--profile"],
    ["up", "--set", "parallel.tp=0"], ["render", "--format", "xml"], ["status", "bad name!"],
])
def test_known_mistakes_exit_2_without_traceback(argv: list[str]) -> None:
    rc, text = _run(argv)
    assert rc == 2, text
    assert "Traceback" not in text
