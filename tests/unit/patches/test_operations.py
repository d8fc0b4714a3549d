"""The patch engine on small synthetic vLLM trees: apply / verify / revert / status / drift / bad input."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from forklift import patches
from forklift.errors import PatchError
from forklift.patches import core
from forklift.patches.operations import RunnerTree
from forklift.runner import Completed, Spawned

KV = '''import torch


class KVCacheScaleParameter(torch.nn.Parameter):
    """Scalar."""

    @staticmethod
    def weight_loader(param: torch.nn.Parameter, loaded_weight: torch.Tensor) -> None:
        param.data.copy_(loaded_weight.reshape(()))


def other(x):
    return x
'''

PATCH: dict[str, Any] = {
    "id": "kv-args",
    "description": "Accept extra args.",
    "vllm": ">=0.30,<0.40",
    "files": [{
        "module": "vllm.model_executor.layers.quantization.kv_cache",
        "edits": [{
            "function": "KVCacheScaleParameter.weight_loader",
            "signature": "(param: torch.nn.Parameter, loaded_weight: torch.Tensor) -> None",
            "old": "loaded_weight: torch.Tensor) -> None:",
            "new": "loaded_weight: torch.Tensor, *args) -> None:",
        }],
        "verify": [{"function": "KVCacheScaleParameter.weight_loader",
                    "signature": "(param: torch.nn.Parameter, loaded_weight: torch.Tensor, *args) -> None"}],
    }],
}
REL = "model_executor/layers/quantization/kv_cache.py"


def make_patch(**changes: object) -> patches.Patch:
    return patches.parse_patch({**PATCH, **changes}, source="test")


def make_tree(tmp_path: Path, text: str = KV, version: str = "0.32.0") -> Path:
    root = tmp_path / "site-packages" / "vllm"
    (root / REL).parent.mkdir(parents=True)
    (root / REL).write_bytes(text.encode())
    (root / "_version.py").write_text(f"__version__ = version = '{version}'\n")
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_apply_verify_revert_round_trip_is_byte_identical(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    before = snapshot(root)
    tree = patches.dir_tree(root)
    assert tree.version == "0.32.0"
    p = make_patch()

    [st] = patches.status(tree, [p])
    assert st.status == "applicable" and st.in_range

    [done] = patches.apply(tree, [p])
    assert done.action == "applied" and done.vllm_version == "0.32.0" and done.marker == "[forklift-patch kv-args]"
    [f] = done.files
    assert f.path == REL
    assert f.original_sha256 == core.sha256(before[REL])
    assert f.patched_sha256 == core.sha256((root / REL).read_bytes())
    assert "loaded_weight: torch.Tensor, *args) -> None:" in (root / REL).read_text()
    assert patches.status(tree, [p])[0].status == "applied"
    assert patches.verify(tree, [p])[0].ok

    patched = snapshot(root)
    [again] = patches.apply(tree, [p])
    assert again.action == "already-applied"
    assert snapshot(root) == patched

    [rev] = patches.revert(tree, [p])
    assert rev.action == "reverted"
    assert snapshot(root) == before  # kept originals and records are gone too
    assert not patches.verify(tree, [p])[0].ok
    assert patches.revert(tree, [p])[0].action == "not-applied"


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    before = snapshot(root)
    [res] = patches.apply(patches.dir_tree(root), [make_patch()], dry_run=True)
    assert res.action == "would-apply"
    assert snapshot(root) == before


def test_crlf_and_non_ascii_survive_byte_for_byte(tmp_path: Path) -> None:
    root = make_tree(tmp_path, KV.replace("Scalar.", "Scalär — ok.").replace("\n", "\r\n"))
    before = snapshot(root)
    p = make_patch(files=[{**PATCH["files"][0], "edits": [{
        "function": "KVCacheScaleParameter.weight_loader", "old": "torch.Tensor) -> None:",
        "new": "torch.Tensor, *args) -> None:"}]}])
    tree = patches.dir_tree(root)
    patches.apply(tree, [p])
    assert b"\r\n" in (root / REL).read_bytes()
    patches.revert(tree, [p])
    assert snapshot(root) == before


def test_drift_names_patch_file_and_difference_and_writes_nothing(tmp_path: Path) -> None:
    root = make_tree(tmp_path, KV.replace("loaded_weight: torch.Tensor) -> None:",
                                          "loaded_weight: torch.Tensor, shard_id: str) -> None:"))
    before = snapshot(root)
    with pytest.raises(patches.PatchConflictError) as exc:
        patches.apply(patches.dir_tree(root), [make_patch()])
    err = exc.value
    assert err.patch_id == "kv-args" and err.kind == "drift" and err.file == REL
    assert "kv-args" in str(err) and REL in str(err)
    assert "shard_id: str" in str(err) and "patch expects" in str(err)
    assert err.fix
    assert snapshot(root) == before


def test_anchor_matching_twice_is_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path, KV + "\n\ndef g(loaded_weight: torch.Tensor) -> None:\n    pass\n")
    before = snapshot(root)
    p = make_patch(files=[{**PATCH["files"][0], "edits": [{
        "old": "loaded_weight: torch.Tensor) -> None:", "new": "loaded_weight: torch.Tensor, *args) -> None:"}]}])
    with pytest.raises(patches.PatchConflictError, match=r"matches 2 times .*lines 8, 16"):
        patches.apply(patches.dir_tree(root), [p])
    assert snapshot(root) == before


def test_function_defined_twice_is_ambiguous(tmp_path: Path) -> None:
    text = KV + "\n\nif True:\n    def other(x):\n        return x\n"
    p = make_patch(files=[{**PATCH["files"][0], "edits": [{
        "function": "other", "old": "return x", "new": "return x + 0"}]}])
    root = make_tree(tmp_path, text)
    with pytest.raises(patches.PatchConflictError, match="defined 2 times"):
        patches.apply(patches.dir_tree(root), [p])


def test_missing_function_and_missing_module_are_reported_as_vanished(tmp_path: Path) -> None:
    root = make_tree(tmp_path, "import torch\n\n\ndef unrelated():\n    pass\n")
    tree = patches.dir_tree(root)
    [st] = patches.status(tree, [make_patch()])
    assert st.status == "vanished"
    assert "KVCacheScaleParameter.weight_loader not found" in st.files[0].problems[0]
    (root / REL).unlink()
    [st] = patches.status(tree, [make_patch()])
    assert st.status == "vanished" and "target vanished" in st.files[0].problems[0]
    with pytest.raises(patches.PatchConflictError) as exc:
        patches.apply(tree, [make_patch()])
    assert exc.value.kind == "vanished"


def test_module_alternatives_follow_a_moved_file(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    (root / "old_place").mkdir()
    (root / REL).rename(root / "old_place" / "kv_cache.py")
    p = make_patch(files=[{**PATCH["files"][0], "module": [
        "vllm.model_executor.layers.quantization.kv_cache", "vllm.old_place.kv_cache"]}])
    [done] = patches.apply(patches.dir_tree(root), [p])
    assert done.files[0].path == "old_place/kv_cache.py"


def test_version_outside_range_is_refused_unless_ignored(tmp_path: Path) -> None:
    root = make_tree(tmp_path, version="0.26.0")
    before = snapshot(root)
    tree = patches.dir_tree(root)
    with pytest.raises(patches.PatchVersionError, match=r"kv-args is for vllm>=0.30,<0.40.*0\.26\.0"):
        patches.apply(tree, [make_patch()])
    assert snapshot(root) == before
    assert patches.status(tree, [make_patch()])[0].in_range is False
    patches.apply(tree, [make_patch()], ignore_version=True)
    assert patches.verify(tree, [make_patch()])[0].ok


def test_local_version_suffix_counts_as_in_range(tmp_path: Path) -> None:
    root = make_tree(tmp_path, version="0.32.0+cpu")
    assert patches.status(patches.dir_tree(root), [make_patch()])[0].in_range is True


def test_read_only_site_packages_is_refused_even_as_root(tmp_path: Path) -> None:
    # Root passes os.access checks, so the engine refuses paths with no write bit for anyone (and
    # read-only filesystems, via statvfs). Here: the copy is chmod a-w, like a locked install.
    root = make_tree(tmp_path)
    before = snapshot(root)
    locked = [root / REL, (root / REL).parent, root]
    for path in locked:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        with pytest.raises(patches.PatchReadOnlyError, match="read-only"):
            patches.apply(patches.dir_tree(root), [make_patch()])
        assert snapshot(root) == before
        assert not (root / core.STATE_DIR).exists()
    finally:
        for path in locked:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_unwritable_reason_reports_read_only_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.statvfs

    class RO:
        def __init__(self, st: os.statvfs_result) -> None:
            self.f_flag = st.f_flag | os.ST_RDONLY

    monkeypatch.setattr(os, "statvfs", lambda p: RO(real(p)))
    assert "read-only filesystem" in str(core.unwritable_reason(str(tmp_path)))


def test_revert_refuses_a_file_changed_after_patching(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    tree = patches.dir_tree(root)
    patches.apply(tree, [make_patch()])
    (root / REL).write_text((root / REL).read_text() + "# local edit\n")
    edited = snapshot(root)
    with pytest.raises(patches.PatchConflictError, match="changed since forklift patched it"):
        patches.revert(tree, [make_patch()])
    assert snapshot(root) == edited


def test_two_patches_on_one_file_stack_and_revert_in_order(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    before = snapshot(root)
    second = patches.parse_patch({
        "id": "other-plus", "description": "d", "vllm": ">=0.30",
        "files": [{"module": "vllm.model_executor.layers.quantization.kv_cache",
                   "edits": [{"function": "other", "old": "return x\n", "new": "return x  # stacked\n"}],
                   "verify": [{"function": "other", "contains": "# stacked"}]}],
    }, source="test")
    tree = patches.dir_tree(root)
    patches.apply(tree, [make_patch(), second])
    states = {s.patch_id: s.status for s in patches.status(tree, [make_patch(), second])}
    assert states == {"kv-args": "applied", "other-plus": "applied"}
    assert patches.apply(tree, [make_patch()])[0].action == "already-applied"
    with pytest.raises(patches.PatchConflictError, match="revert that one first"):
        patches.revert(tree, [make_patch()])
    patches.revert(tree, [make_patch(), second])  # reverted last-first
    assert snapshot(root) == before


def test_one_bad_patch_means_nothing_is_written(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    before = snapshot(root)
    bad = make_patch(id="bad", files=[{**PATCH["files"][0], "edits": [{
        "old": "this is not in the file", "new": "x"}], "verify": [{"contains": "never-in-file"}]}])
    with pytest.raises(patches.PatchConflictError, match="bad"):
        patches.apply(patches.dir_tree(root), [make_patch(), bad])
    assert snapshot(root) == before


def test_behaviour_already_present_is_a_no_op_and_cannot_be_reverted(tmp_path: Path) -> None:
    root = make_tree(tmp_path, KV.replace("torch.Tensor) -> None:", "torch.Tensor, *args) -> None:"))
    tree = patches.dir_tree(root)
    before = snapshot(root)
    assert patches.status(tree, [make_patch()])[0].status == "present"
    assert patches.apply(tree, [make_patch()])[0].action == "present"
    assert snapshot(root) == before
    with pytest.raises(PatchError, match="did not apply it"):
        patches.revert(tree, [make_patch()])


def test_a_replacement_that_breaks_syntax_is_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    before = snapshot(root)
    p = make_patch(files=[{**PATCH["files"][0], "edits": [{
        "old": "return x", "new": "return x +"}]}])
    with pytest.raises(patches.PatchConflictError, match="does not parse"):
        patches.apply(patches.dir_tree(root), [p])
    assert snapshot(root) == before


class InProcessRunner:
    """A Runner that runs core.py's program mode in this process (the node side of RunnerTree)."""

    host = "node1"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            input: str | None = None) -> Completed:
        argv = list(argv)
        self.calls.append(argv)
        assert argv[1] == "-c" and argv[2] == patches.operations.core_source()
        out = io.StringIO()
        with _stdio(out, input or ""):
            rc = core._program(argv[3:])
        return Completed(self.host, tuple(argv), rc, out.getvalue(), "")

    def spawn(self, argv: Sequence[str], *, log_path: str, env: Mapping[str, str] | None = None,
              cwd: str | None = None, secret_env: Mapping[str, str] | None = None) -> Spawned:
        raise NotImplementedError


@contextlib.contextmanager
def _stdio(out: io.StringIO, stdin: str) -> Iterator[None]:
    import sys

    old_out, old_in = sys.stdout, sys.stdin
    sys.stdout, sys.stdin = out, io.StringIO(stdin)
    try:
        yield
    finally:
        sys.stdout, sys.stdin = old_out, old_in


def test_runner_tree_round_trip_through_argv_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path)
    before = snapshot(root)
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    runner = InProcessRunner()
    tree = patches.open_tree(runner, "/opt/venv/bin/python")
    assert isinstance(tree, RunnerTree)
    assert tree.version == "0.32.0" and tree.label == f"node1:{root}"
    [done] = patches.apply(tree, [make_patch()])
    assert done.host == "node1" and done.vllm_root == str(root)
    assert patches.verify(tree, [make_patch()])[0].ok
    patches.revert(tree, [make_patch()])
    assert snapshot(root) == before
    for argv in runner.calls:  # every call is an argv list: python -c <program> OP ...
        assert argv[0] == "/opt/venv/bin/python" and argv[3] in {"locate", "read", "write", "delete", "unwritable"}
    writes = [c for c in runner.calls if c[3] == "write"]
    assert writes


def test_apply_for_recipe_returns_record_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_tree(tmp_path, version="0.32.0")
    monkeypatch.setenv("FORKLIFT_VLLM_DIR", str(root))
    done = patches.apply_for_recipe(InProcessRunner(), "python3", ["kv-scale-loader-args"])
    [entry] = done
    rec = entry.to_json()
    assert rec["id"] == "kv-scale-loader-args" and rec["vllm_version"] == "0.32.0" and rec["action"] == "applied"
    assert rec["files"][0]["original_sha256"] != rec["files"][0]["patched_sha256"]
    json.dumps(rec)
    assert patches.apply_for_recipe(InProcessRunner(), "python3", []) == []


def test_record_is_kept_beside_vllm(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    patches.apply(patches.dir_tree(root), [make_patch()])
    rec = json.loads((root / core.record_rel("kv-args")).read_text())
    assert rec["marker"] == "[forklift-patch kv-args]" and rec["vllm_version"] == "0.32.0"
    assert (root / core.original_rel("kv-args", REL)).read_text() == KV


def test_an_insertion_that_steals_a_decorator_is_refused() -> None:
    src = "import functools\n\n\n@functools.cache\nclass Model:\n    pass\n"
    helper = "\ndef _helper():\n    return 1\n\n\n"
    with pytest.raises(core.Drift) as exc:
        core.apply_edits(src, [core.Edit(old="\nclass Model:\n", new=helper + "class Model:\n")])
    assert exc.value.problems == ["the replacement is wrong: Model lost its decorators @functools.cache to the "
                                  "inserted _helper; include the decorator lines in the anchor"]
    fixed = core.apply_edits(src, [core.Edit(old="\n@functools.cache\nclass Model:\n",
                                             new=helper + "@functools.cache\nclass Model:\n")])
    assert "_helper():\n    return 1\n\n\n@functools.cache\nclass Model:" in fixed
