"""A recipe's patches: typed entries, unknown ids refused by plan and render, the version override noted, the
container files and launch wiring of the docker runtime, the launcher's apply-before-import, and the log lines
that the run record is filled from."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from forklift import recipe as recipes
from forklift.engine import vllm_main
from forklift.errors import RecipeError
from forklift.launch.launch_spec import NodePaths
from forklift.patches import core
from forklift.patches import recipes as recipe_patches
from forklift.patches.operations import core_source
from forklift.plan import for_launch, make
from forklift.recipe.schema import PatchRef, Recipe
from tests.helpers import launch_of
from tests.unit.patches.test_operations import KV, REL, make_tree, snapshot

NIGHTLY = "0.1.dev16581+gdda4668b5"
BECAUSE = "nightly 0.1.dev16581 carries the same kv_cache.py"
DOCKER = "runtime={kind: docker, image: 'vllm/vllm-openai:v0.32.0'}"
TWO_NODES = "nodes=[{host: a, ssh: root@10.231.0.1, data_ip: 10.231.0.1}, {host: b, ssh: root@10.231.0.2}]"
PATHS = {0: NodePaths(run_dir="/home/u/run", home="/home/u"), 1: NodePaths(run_dir="/root/run", home="/root")}


def _recipe(*sets: str) -> Recipe:
    return recipes.load("default", list(sets))


def _override(pid: str = "kv-scale-loader-args") -> str:
    return f"patches=[{{id: {pid}, any_version: true, because: '{BECAUSE}'}}]"


# --- typed entries --------------------------------------------------------------------------------------------

def test_entries_are_ids_or_typed_mappings_and_plain_ids_dump_as_text() -> None:
    r = _recipe("patches=[kv-scale-loader-args, {id: pp-shard-filter, any_version: true, because: nightly}]")
    assert r.patches == [PatchRef(id="kv-scale-loader-args"),
                         PatchRef(id="pp-shard-filter", any_version=True, because="nightly")]
    assert r.patch_ids == ["kv-scale-loader-args", "pp-shard-filter"]
    dumped = r.model_dump(mode="json")["patches"]
    assert dumped == ["kv-scale-loader-args", {"id": "pp-shard-filter", "any_version": True, "because": "nightly"}]
    assert Recipe.model_validate(r.model_dump(mode="json")).patches == r.patches


@pytest.mark.parametrize("entry, words", [
    ("{id: kv-scale-loader-args, any_version: true}", "any_version needs `because`"),
    ("{id: kv-scale-loader-args, any_version: true, because: '  '}", "any_version needs `because`"),
    ("{id: kv-scale-loader-args, because: nightly}", "`because` explains any_version"),
    ("{id: kv-scale-loader-args, any_versions: true}", "any_versions"),
])
def test_a_version_override_says_why(entry: str, words: str) -> None:
    with pytest.raises(RecipeError) as exc:
        _recipe(f"patches=[{entry}]")
    assert "patches" in str(exc.value) and words in str(exc.value)


def test_because_is_required_in_the_model_too() -> None:
    with pytest.raises(ValidationError, match="any_version needs `because`"):
        PatchRef(id="x", any_version=True)


# --- unknown ids: plan, render (for_launch) and the library refuse before anything else -----------------------

def test_unknown_id_fails_make_and_for_launch_with_did_you_mean() -> None:
    bad = _recipe("patches=[kv-scale-loader-arg]")
    with pytest.raises(RecipeError, match=r"patches\[0\]: unknown patch 'kv-scale-loader-arg'; "
                                          r"did you mean 'kv-scale-loader-args'\?"):
        make(bad)
    for force in (False, True):  # never turned into an Unplanned record
        with pytest.raises(RecipeError, match="did you mean 'kv-scale-loader-args'"):
            for_launch(bad, force=force)
    with pytest.raises(RecipeError, match="unknown patch 'zzz'") as exc:
        make(_recipe("patches=[kv-scale-loader-args, zzz]"))
    assert "patches[1]" in str(exc.value) and "forklift patch list" in (exc.value.fix or "")


def test_a_users_own_patch_is_known(_isolated_home: Path) -> None:
    src = (Path(recipe_patches.__file__).parent / "catalog" / "kv-scale-loader-args.yaml").read_text()
    (_isolated_home / "patches").mkdir(parents=True)
    (_isolated_home / "patches" / "mine.yaml").write_text(src.replace("id: kv-scale-loader-args", "id: mine"))
    assert [r.patch.id for r in recipe_patches.resolve(_recipe("patches=[mine]"))] == ["mine"]


def test_plan_notes_show_the_patches_and_each_override() -> None:
    plain = make(_recipe("patches=[kv-scale-loader-args]"))
    assert [n for n in plain.notes if "patch" in n] == [
        "patches kv-scale-loader-args: applied and verified on each node's vLLM by `up` before any rank starts"]
    over = make(_recipe(DOCKER, _override()))
    notes = [n for n in over.notes if "patch" in n]
    assert "in each container, by forklift's launcher, before vLLM is imported" in notes[0]
    assert notes[1] == (f"patch kv-scale-loader-args is for vllm>=0.26,<0.34 but is applied whatever the vLLM "
                        f"version (any_version): {BECAUSE}")
    assert not [n for n in make(_recipe()).notes if "patch" in n]


# --- docker: files, mounts, env, Ray daemons through the launcher --------------------------------------------

def test_container_spec_carries_definitions_and_overrides() -> None:
    r = _recipe(DOCKER, "patches=[safetensors-fadvise-dontneed, "
                        f"{{id: kv-scale-loader-args, any_version: true, because: '{BECAUSE}'}}]")
    files = recipe_patches.container_files(r)
    assert set(files) == {"patches.json", "forklift_patch_core.py"}
    assert files["forklift_patch_core.py"] == core_source()
    spec = json.loads(files["patches.json"])
    got = [(p.id, ig, why) for p, ig, why in core.spec_entries(spec)]
    assert got == [("safetensors-fadvise-dontneed", False, None), ("kv-scale-loader-args", True, BECAUSE)]
    assert recipe_patches.container_files(_recipe("patches=[kv-scale-loader-args]")) == {}  # venv: none
    assert recipe_patches.container_files(_recipe(DOCKER)) == {}


def test_launcher_and_engine_agree_on_the_file_names() -> None:
    assert vllm_main.CORE_FILE == recipe_patches.CORE_FILE
    assert vllm_main.PATCHES_ENV == recipe_patches.PATCHES_ENV
    assert vllm_main.EXEC_FLAG == recipe_patches.EXEC_FLAG


def _mounts_env(argv: list[str]) -> tuple[list[str], list[str]]:
    return ([argv[i + 1] for i, x in enumerate(argv) if x == "-v"], [argv[i + 1] for i, x in enumerate(argv)
                                                                     if x == "-e"])


def test_docker_ranks_mount_the_patch_files_and_run_the_launcher() -> None:
    r = recipes.load("default", [TWO_NODES, "parallel.pp=2", DOCKER, "patches=[kv-scale-loader-args]"])
    launch = launch_of(r, "/m", run_id="abc", node_paths=PATHS)
    for rl in launch.ranks:
        mounts, env = _mounts_env(rl.argv)
        run_dir = PATHS[rl.node_index].run_dir
        assert f"{run_dir}/patches.json:/opt/forklift/patches.json:ro" in mounts
        assert f"{run_dir}/forklift_patch_core.py:/opt/forklift/forklift_patch_core.py:ro" in mounts
        assert "FORKLIFT_PATCHES=/opt/forklift/patches.json" in env
        image_at = rl.argv.index("vllm/vllm-openai:v0.32.0")
        assert rl.argv[image_at + 1: image_at + 4] == ["python3", "/opt/forklift/vllm_main.py", "serve"]
    plain = launch_of(recipes.load("default", [TWO_NODES, "parallel.pp=2", DOCKER]), "/m", run_id="abc",
                      node_paths=PATHS)
    assert not any("patches.json" in a or "FORKLIFT_PATCHES" in a for rl in plain.ranks for a in rl.argv)
    venv = launch_of(recipes.load("default", [TWO_NODES, "parallel.pp=2", "patches=[kv-scale-loader-args]"]), "/m",
                     run_id="abc", node_paths=PATHS)
    assert not any("FORKLIFT_PATCHES" in a for rl in venv.ranks for a in rl.argv)
    assert not any("FORKLIFT_PATCHES" in k for rl in venv.ranks for k in rl.env)


def test_ray_daemons_in_containers_apply_patches_before_ray_starts() -> None:
    r = recipes.load("default", [TWO_NODES, "parallel.pp=2", "parallel.backend=ray", "nodes.0.hardware=gb10",
                                 "nodes.1.hardware=gb10", DOCKER, "patches=[kv-scale-loader-args]"])
    launch = launch_of(r, "/m", run_id="abc", node_paths=PATHS)
    for rl in launch.ray:
        image_at = rl.argv.index("vllm/vllm-openai:v0.32.0")
        assert rl.argv[image_at + 1: image_at + 8] == [
            "python3", "/opt/forklift/vllm_main.py", "--forklift-exec", "python3", "-m", "ray.scripts.scripts", "start"]
        assert "FORKLIFT_PATCHES=/opt/forklift/patches.json" in _mounts_env(rl.argv)[1]


def test_bundled_seed_recipe_renders_its_patches_without_weights() -> None:
    deployment = recipes.resolve("glm-5.2-reap-3x-spark-pp3", [])
    r = deployment.recipe
    assert r.patch_ids == ["glm5-reap-dsa-off", "safetensors-fadvise-dontneed", "triton-mla-decode-num-stages"]
    assert all(p.any_version and p.because for p in r.patches)
    assert r.env["VLLM_DISABLE_DSA"] == "1"
    launch = launch_of(r, run_id="abc")
    assert all("FORKLIFT_PATCHES=/opt/forklift/patches.json" in _mounts_env(p.argv)[1] for p in launch.processes)
    notes = recipe_patches.notes(r)
    assert len(notes) == 4 and all("(any_version)" in n for n in notes[1:])


# --- in the container: apply and verify before import, one line per file -----------------------------------

def _spec(*entries: tuple[str, bool]) -> dict[str, object]:
    from forklift import patches

    return {"format": core.SPEC_FORMAT, "patches": [
        {"patch": patches.get([pid])[0].to_core().to_json(), "ignore_version": ig, "because": BECAUSE if ig else None}
        for pid, ig in entries]}


def test_container_apply_writes_marker_lines_with_the_patched_hash(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path)
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    out = io.StringIO()
    assert core.container_apply(_spec(("kv-scale-loader-args", False)), out) == 0
    digest = core.sha256((root / REL).read_bytes())
    assert out.getvalue() == (f"[forklift-patch kv-scale-loader-args] applied to vllm/{REL} (sha256 {digest}) "
                              "on vLLM 0.32.0\n")
    assert "*args" in (root / REL).read_text()
    again = io.StringIO()
    assert core.container_apply(_spec(("kv-scale-loader-args", False)), again) == 0
    assert again.getvalue().startswith("[forklift-patch kv-scale-loader-args] already applied to vllm/")


def test_outside_the_range_stops_unless_the_recipe_allows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path, version=NIGHTLY)
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    before = snapshot(root)
    out = io.StringIO()
    assert core.container_apply(_spec(("kv-scale-loader-args", False)), out) == 3
    assert out.getvalue().startswith("[forklift-patch] ERROR (version): patch kv-scale-loader-args is for "
                                     f"vllm>=0.26,<0.34, but {root} has vLLM {NIGHTLY}")
    assert "vLLM was not started" in out.getvalue() and snapshot(root) == before
    ok = io.StringIO()
    assert core.container_apply(_spec(("kv-scale-loader-args", True)), ok) == 0
    first, second = ok.getvalue().splitlines()
    assert first == (f"[forklift-patch kv-scale-loader-args] vLLM {NIGHTLY} is outside vllm>=0.26,<0.34; "
                     f"applied anyway (any_version: {BECAUSE})")
    assert second.startswith(f"[forklift-patch kv-scale-loader-args] applied to vllm/{REL} (sha256 ")


def test_drift_stops_with_the_problem_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path, text=KV.replace("loaded_weight: torch.Tensor) -> None", "w, shard_id) -> None"))
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    out = io.StringIO()
    assert core.container_apply(_spec(("kv-scale-loader-args", False)), out) == 3
    assert out.getvalue().startswith("[forklift-patch] ERROR (drift): patch kv-scale-loader-args on ")
    assert "KVCacheScaleParameter.weight_loader" in out.getvalue()


def _container_dir(tmp_path: Path, spec: dict[str, object]) -> Path:
    d = tmp_path / "opt-forklift"
    d.mkdir()
    (d / "patches.json").write_text(json.dumps(spec))
    (d / "forklift_patch_core.py").write_text(core_source())
    return d


def test_launcher_applies_from_the_mounted_files_and_refuses_to_start_on_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert vllm_main.apply_patches() == 0  # no FORKLIFT_PATCHES: nothing to do (venv runtime)
    root = make_tree(tmp_path)
    d = _container_dir(tmp_path, _spec(("kv-scale-loader-args", False)))
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    monkeypatch.setenv("FORKLIFT_PATCHES", str(d / "patches.json"))
    assert vllm_main.apply_patches() == 0
    assert "[forklift-patch kv-scale-loader-args] applied to vllm/" in capsys.readouterr().err
    (d / "forklift_patch_core.py").unlink()
    assert vllm_main.apply_patches() == 3
    assert "[forklift-patch] ERROR (missing): cannot load the patch engine" in capsys.readouterr().err
    shutil.rmtree(d)
    d = _container_dir(tmp_path, {"format": 1, "patches": [{"nope": 1}]})
    assert vllm_main.apply_patches() == 3
    assert "[forklift-patch] ERROR (spec)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        monkeypatch.setattr("sys.argv", ["vllm_main.py", "serve", "m"])
        vllm_main.main()  # exits before `import vllm`
    assert stop.value.code == 3


# --- back in the run record -------------------------------------------------------------------------------

def test_log_lines_become_record_entries_and_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = _recipe(DOCKER, _override())
    root = make_tree(tmp_path, version=NIGHTLY)
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    out = io.StringIO()
    assert core.container_apply(json.loads(recipe_patches.container_spec(r)), out) == 0
    log = ["INFO 05-21 starting", *out.getvalue().splitlines(), "[forklift-patch other] applied to x (sha256 y)"]
    [entry] = recipe_patches.parse_log(log, "spark-1", r)
    digest = core.sha256((root / REL).read_bytes())
    assert entry == {"id": "kv-scale-loader-args", "marker": "[forklift-patch kv-scale-loader-args]",
                     "host": "spark-1", "vllm_version": NIGHTLY, "vllm": ">=0.26,<0.34", "any_version": True,
                     "because": BECAUSE, "action": "applied", "files": [{"path": f"vllm/{REL}",
                                                                          "patched_sha256": digest}]}
    assert recipe_patches.pins([entry]) == [{"id": "kv-scale-loader-args", "host": "spark-1",
                                             "files": {f"vllm/{REL}": digest}}]
    venv_entry = {"id": "p", "host": "h", "vllm_root": "/v/lib/site-packages/vllm",
                  "files": [{"path": REL, "patched_sha256": digest}]}
    assert recipe_patches.pins([venv_entry])[0]["files"] == {f"vllm/{REL}": digest}
    assert recipe_patches.pins([{**entry, "files": []}]) == []


def test_up_plans_docker_patches_and_reads_each_containers_hashes_back(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from forklift.cluster import up
    from forklift.launch.render import render
    from forklift.record import RankState, RunRecord
    from forklift.runner import FakeRunner

    r = recipes.load("default", [TWO_NODES, "parallel.pp=2", DOCKER, _override()])
    runners = {0: FakeRunner("a"), 1: FakeRunner("b")}
    [planned] = up.apply_patches(r, runners)
    assert (planned["id"], planned["action"], planned["any_version"]) == ("kv-scale-loader-args", "in-container", True)
    assert not runners[0].calls and not runners[1].calls  # nothing applied from outside the containers
    root = make_tree(tmp_path, version=NIGHTLY)
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    out = io.StringIO()
    core.container_apply(json.loads(recipe_patches.container_spec(r)), out)
    runners[0].on(["grep"], stdout=out.getvalue())
    runners[1].on(["grep"], returncode=1)  # no marker line in node b's log
    plan = for_launch(r, force=True)
    launch = render(plan, run_id="abc", node_paths=PATHS)
    record = RunRecord(name="t", run_id="abc", plan=plan, launch=launch, endpoint=launch.endpoint,
                       served_name=launch.served_name,
                       ranks=[RankState(rank=rl.rank, host=rl.host, container=rl.container, node_index=rl.node_index,
                                        log_path=f"{rl.run_dir}/{rl.log_name}") for rl in launch.ranks])
    [entry] = up.container_patches(record, runners)
    assert (entry["host"], entry["container"], entry["action"]) == ("a", "forklift-abc-rank0", "applied")
    assert entry["files"] == [{"path": f"vllm/{REL}", "patched_sha256": core.sha256((root / REL).read_bytes())}]
    [grep] = runners[0].ran("grep")
    assert grep.argv == ("grep", "-a", "-F", "-e", "[forklift-patch kv-scale-loader-args]",
                         f"/home/u/run/{launch.head.log_name}")


def test_a_failed_start_names_the_patches_key_not_a_word_in_a_vllm_path() -> None:
    from forklift.cluster.phases import relevant_tail, startup_hint

    log = Path(__file__).parents[2] / "data" / "doctor" / "excerpts" / "forklift-launcher-patch-drift.log"
    tail = relevant_tail(log.read_text().splitlines())
    assert any(line.startswith("[forklift-patch] ERROR (drift): patch kv-scale-loader-args") for line in tail)
    hint = startup_hint(tail)
    assert hint is not None and hint[0] == "patches"  # not serve.quantization from .../quantization/kv_cache.py
