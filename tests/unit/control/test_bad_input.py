"""Issue 15, as a new user meets it from a control machine: each case reproduced, then fixed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main as typer_main
from typer.core import TyperGroup
from typer.testing import CliRunner

from forklift import recipe as recipes
from forklift.errors import PlanError, RecipeError
from forklift.launch.render import render
from forklift.plan import Plan, for_launch, make
from tests.helpers import forklift


@pytest.mark.parametrize("name", recipes.bundled_names())
def test_every_bundled_recipe_plans_and_renders_without_its_weights(name: str, tmp_path: Path) -> None:
    # an empty cache: no prepared bundled model, no Hugging Face snapshot, no ~/models on this machine
    env = {"FORKLIFT_CACHE": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf")}
    plan = forklift("plan", name, "--json", home=tmp_path / "home", env=env)
    assert "Traceback" not in plan.stderr
    if name == "default":  # the bundled model's config comes from its prepared copy: the fix says how
        assert plan.returncode == 1 and "forklift model prepare bundled:smollm2-135m-instruct" in plan.stderr
    else:
        assert plan.returncode in (0, 1), plan.stderr  # 1: a plan that does not fit is a verdict, not a crash
        data = json.loads(plan.stdout)
        assert data["ranks"] and (data["fits"] or data["error"])
    rendered = forklift("render", name, "--json", home=tmp_path / "home", env=env)
    assert rendered.returncode == 0, rendered.stderr
    assert json.loads(rendered.stdout)["ranks"]


def test_render_mounts_expand_the_home_and_never_hand_docker_a_tilde() -> None:
    from forklift.launch.launch_spec import NodePaths

    plan = for_launch(recipes.load("glm-4.7-nvfp4-2x-spark"))
    paths = {0: NodePaths(run_dir="/home/me/run", home="/home/me"), 1: NodePaths(run_dir="/home/you/run",
                                                                                  home="/home/you")}
    launch = render(plan, run_id="abc", node_paths=paths)
    for rank in launch.ranks:
        mounts = [rank.argv[i + 1] for i, a in enumerate(rank.argv) if a == "-v"]
        assert not any(m.startswith("~") for m in mounts)
        home = paths[rank.node_index].home
        assert f"{home}/models/GLM-4.7-NVFP4:/models/GLM-4.7-NVFP4:ro" in mounts  # host path : container path
        assert rank.argv[rank.argv.index("serve") + 1] == "/models/GLM-4.7-NVFP4"  # vLLM sees the container path
        assert rank.model_path == f"{home}/models/GLM-4.7-NVFP4"  # preflight looks at the host path


@pytest.mark.parametrize(("sets", "words"), [
    (["model.config=glm-4.7", "parallel.tp=3"], "divide"),  # 8 KV heads, 96 heads
    (["model.config=glm-4.7", "parallel.pp=200", "nodes=[{host: a, hardware: h200}]"], "layers"),
])
def test_render_refuses_layouts_vllm_rejects(sets: list[str], words: str) -> None:
    r = recipes.load("default", sets)
    with pytest.raises(PlanError, match=words):
        render(for_launch(r))
    assert for_launch(r, force=True).kind == "unplanned"  # --force still renders, and says why there is no plan


@pytest.mark.parametrize(("item", "field"), [
    ("nodes.0.data_ip=not an ip", "data_ip"),
    ("nodes.0.ssh=user@spark-1:notaport", "ssh"),
    ("serve.bogus=1", "serve.bogus"),
])
def test_bad_set_values_are_blamed_on_the_set_item(item: str, field: str) -> None:
    with pytest.raises(RecipeError) as err:
        recipes.resolve("default", [item])
    assert f"--set {item}" in str(err.value) and field in str(err.value)
    assert "in --set" in str(err.value)  # not blamed on the recipe file


def test_set_list_entries_and_examples() -> None:
    d = recipes.resolve("default", ["patches.0=kv-scale-loader-args"])
    assert d.recipe.patch_ids == ["kv-scale-loader-args"]  # entries are typed (PatchRef)
    with pytest.raises(RecipeError) as err:
        recipes.resolve("default", ["patches.5=x"])
    assert "past the end" in str(err.value) and "--set 'patches=[" in (err.value.fix or "")


@pytest.mark.parametrize("content", [b"\x00\x01\x02binary", "model: {source: caf\xe9}\n".encode("latin-1"),
                                     b"a: " + b"[" * 5000 + b"]" * 5000])
def test_unreadable_recipe_files_are_recipe_errors(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "r.yaml"
    path.write_bytes(content)
    with pytest.raises(RecipeError) as err:
        recipes.resolve(str(path))
    assert str(path) in str(err.value) and err.value.fix


def test_a_cluster_file_plans_like_the_same_nodes_inline(tmp_path: Path) -> None:
    inline = recipes.load("glm-4.7-nvfp4-2x-spark")
    cluster = tmp_path / "two-sparks.yaml"
    cluster.write_text(json.dumps({"nodes": [n.model_dump(mode="json", exclude_none=True) for n in inline.nodes],
                                   "network": inline.network.model_dump(mode="json")}))
    data = inline.model_dump(mode="json")
    data.pop("nodes")
    data.pop("network")
    data["cluster"] = str(cluster)
    recipe_file = tmp_path / "with-cluster.yaml"
    recipe_file.write_text(json.dumps(data))
    via_file, via_inline = make(recipes.resolve(str(recipe_file))), make(inline)
    assert isinstance(via_file, Plan) and via_file.deployment.cluster_file == str(cluster)
    assert via_file.to_json() | {"recipe": None} == via_inline.to_json() | {"recipe": None}
    assert via_file.kv_tokens == via_inline.kv_tokens and via_file.platform == "cuda"


def _command_paths() -> list[list[str]]:
    from forklift.cli.main import COMMANDS, app

    group = typer_main.get_command(app)
    assert isinstance(group, TyperGroup)
    ctx = group.make_context("forklift", [], resilient_parsing=True)
    paths: list[list[str]] = []
    for name in COMMANDS:
        cmd = group.get_command(ctx, name)
        paths.append([name])
        if isinstance(cmd, TyperGroup):
            paths += [[name, sub] for sub in cmd.list_commands(ctx)]
    return paths


def test_every_command_and_subcommand_prints_its_help() -> None:
    runner = CliRunner()
    from forklift.cli.main import app

    paths = _command_paths()
    assert len(paths) > len(set(p[0] for p in paths))  # subcommands were found too
    for path in paths:
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
        assert res.exit_code == 0 and res.exception is None, (path, res.output[-2000:], res.exception)
        assert "Usage" in res.output, path


def test_brackets_in_a_user_value_are_printed_not_parsed_as_markup(tmp_path: Path) -> None:
    for args in (["doctor", "[/x]"], ["compare", "[/x]", "[bold]b"]):
        res = forklift(*args, home=tmp_path)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert "[/x]" in res.stderr
