from __future__ import annotations

from pathlib import Path

import pytest

from forklift import recipe as recipes
from forklift.errors import RecipeError, RecipeNotFoundError
from forklift.recipe.schema import Capabilities


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_default_recipe_is_bundled_smollm2_on_cpu() -> None:
    r = recipes.load("default")
    assert r.model.source == "bundled:smollm2-135m-instruct"
    assert r.runtime.kind == "venv"
    assert [n.host for n in r.nodes] == ["localhost"]
    assert r.nodes[0].hardware == "cpu"
    assert "default" in recipes.bundled_names()


def test_unknown_key_names_path_and_suggests(tmp_path: Path) -> None:
    p = write(tmp_path, "r.yaml", "model: {source: /m}\nserve:\n  max_model_lenght: 4096\n")
    with pytest.raises(RecipeError) as ei:
        recipes.load(str(p))
    msg = str(ei.value)
    assert str(p) in msg
    assert "serve.max_model_lenght: unknown field; did you mean 'max_model_len'?" in msg


def test_unknown_top_level_key_suggests(tmp_path: Path) -> None:
    p = write(tmp_path, "r.yaml", "model: {source: /m}\nparalel: {tp: 2}\n")
    with pytest.raises(RecipeError, match="did you mean 'parallel'"):
        recipes.load(str(p))


def test_unknown_key_inside_list_item_and_union(tmp_path: Path) -> None:
    p = write(tmp_path, "r.yaml", "model: {source: /m}\nnodes:\n  - {host: a, hardwre: gb10}\n"
              "runtime: {kind: docker, image: x, imagee: y}\n")
    with pytest.raises(RecipeError) as ei:
        recipes.load(str(p))
    problems = ei.value.problems
    assert any(p.startswith("nodes.0.hardwre") and "did you mean 'hardware'" in p for p in problems)
    assert any(p.startswith("runtime.imagee") and "did you mean 'image'" in p for p in problems)


def test_wrong_type_is_reported_with_value(tmp_path: Path) -> None:
    p = write(tmp_path, "r.yaml", "model: {source: /m}\nserve: {port: eighty}\n")
    with pytest.raises(RecipeError, match=r"serve\.port: .*integer.*'eighty'"):
        recipes.load(str(p))


def test_tp_below_one_rejected() -> None:
    with pytest.raises(RecipeError, match=r"parallel\.tp: Input should be greater than or equal to 1"):
        recipes.load("default", ["parallel.tp=0"])


def test_set_overrides_nested_and_list_fields() -> None:
    r = recipes.load("default", ["serve.max_model_len=2048", "nodes.0.hardware=h200", "env.FOO=bar"])
    assert r.serve.max_model_len == 2048
    assert r.nodes[0].hardware == "h200"
    assert r.env == {"FOO": "bar"}


def test_set_without_equals_is_an_error() -> None:
    with pytest.raises(RecipeError, match="expected KEY.PATH=VALUE"):
        recipes.load("default", ["serve.port"])


def test_extends_merges_and_child_wins(tmp_path: Path) -> None:
    write(tmp_path, "base.yaml", "model: {source: /m, served_name: base}\nserve: {port: 9000, max_model_len: 1024}\n")
    child = write(tmp_path, "child.yaml", "extends: base.yaml\nserve: {max_model_len: 2048}\n")
    r = recipes.load(str(child))
    assert r.serve.port == 9000 and r.serve.max_model_len == 2048
    assert r.model.served_name == "base"
    assert r.name == "child"


def test_extends_bundled_by_name(tmp_path: Path) -> None:
    child = write(tmp_path, "c.yaml", "extends: default\nserve: {port: 8123}\n")
    r = recipes.load(str(child))
    assert r.model.source == "bundled:smollm2-135m-instruct" and r.serve.port == 8123


def test_capabilities_belong_to_the_model_not_the_parent_recipe(tmp_path: Path) -> None:
    same = recipes.load(str(write(tmp_path, "same.yaml", "extends: default\nserve: {port: 8123}\n")))
    assert same.model.capabilities.tools is False  # still SmolLM2: what the default says of it holds
    other = recipes.load(str(write(tmp_path, "other.yaml", "extends: default\nmodel: {source: ORG/NAME}\n")))
    assert other.model.capabilities == Capabilities()
    stated = recipes.load(str(write(tmp_path, "stated.yaml", "extends: default\n"
                                    "model: {source: ORG/NAME, capabilities: {tools: false}}\n")))
    assert stated.model.capabilities.tools is False and stated.model.capabilities.exact_answers is True
    with pytest.raises(RecipeError, match="capabilities"):
        recipes.load(str(write(tmp_path, "bad.yaml", "extends: default\nmodel: {capabilities: {tool: true}}\n")))


def test_extends_cycle_detected(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "extends: b.yaml\nmodel: {source: /m}\n")
    b = write(tmp_path, "b.yaml", "extends: a.yaml\n")
    with pytest.raises(RecipeError, match="loops"):
        recipes.load(str(b))


def test_missing_recipe_suggests_bundled() -> None:
    with pytest.raises(RecipeNotFoundError, match="Did you mean 'default'"):
        recipes.load("defualt")


def test_invalid_yaml_names_file(tmp_path: Path) -> None:
    p = write(tmp_path, "bad.yaml", "model: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        recipes.load(str(p))


def test_api_key_env_must_be_a_name_not_a_key() -> None:
    with pytest.raises(RecipeError, match="environment variable name"):
        recipes.load("default", ["serve.api_key_env=sk-abc/123"])


def test_schema_lists_every_memory_and_speed_knob() -> None:
    schema = recipes.schema()
    serve = schema["$defs"]["Serve"]["properties"]
    for knob in ["max_model_len", "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs",
                 "kv_cache_dtype", "quantization", "dtype", "enforce_eager", "block_size",
                 "cpu_kv_cache_gib", "reasoning_parser", "tool_call_parser", "enable_auto_tool_choice",
                 "speculative", "api_key_env", "extra_args"]:
        assert knob in serve
    par = schema["$defs"]["Parallel"]["properties"]
    assert {"tp", "pp", "dp", "dcp"} <= set(par)


def test_auto_tool_choice_requires_parser() -> None:
    with pytest.raises(RecipeError, match="needs tool_call_parser"):
        recipes.load("default", ["serve.tool_call_parser=null"])
