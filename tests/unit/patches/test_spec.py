"""Patch files are data: the catalog validates, and bad files fail with the file, field path and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from forklift import patches
from forklift.errors import PatchError
from forklift.patches import spec

SEED_PATCHES = {"kv-scale-loader-args", "safetensors-fadvise-dontneed", "pp-shard-filter",
                "triton-mla-decode-num-stages"}


def valid() -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load(spec.source_text(patches.get(["kv-scale-loader-args"])[0])))


def test_catalog_has_the_seed_patches_and_each_is_complete() -> None:
    cat = patches.catalog()
    assert set(cat) >= SEED_PATCHES
    for p in cat.values():
        core = p.to_core()
        assert core.marker == f"[forklift-patch {p.id}]"
        assert all(f.edits and f.verify for f in core.files)
        assert spec.source_text(p).startswith(f"id: {p.id}\n")


def test_user_patches_dir_adds_patches(tmp_path: Path, _isolated_home: Path) -> None:
    d = spec.user_dir()
    d.mkdir(parents=True)
    data = {**valid(), "id": "mine"}
    (d / "mine.yaml").write_text(yaml.safe_dump(data))
    assert "mine" in patches.catalog()


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    data = valid()
    del data["vllm"]
    files = data["files"]
    assert isinstance(files, list)
    del files[0]["verify"]
    path = tmp_path / "kv-scale-loader-args.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PatchError) as exc:
        patches.load_patch_file(path)
    msg = str(exc.value)
    assert str(path) in msg
    assert "vllm: required field is missing" in msg
    assert "files[0].verify: required field is missing" in msg
    assert exc.value.fix


def test_unknown_field_suggests_the_right_one() -> None:
    data = {**valid(), "vllm_range": ">=1"}
    with pytest.raises(PatchError, match="vllm_range: unknown field; did you mean 'vllm'"):
        patches.parse_patch(data, source="x.yaml")


@pytest.mark.parametrize(("change", "message"), [
    ({"vllm": "0.26 or newer"}, "is not a version specifier"),
    ({"id": "Bad Id"}, "id:"),
    ({"files": []}, "files:"),
])
def test_bad_values(change: dict[str, object], message: str) -> None:
    with pytest.raises(PatchError, match=message):
        patches.parse_patch({**valid(), **change}, source="p")


def test_bad_module_and_anchor_and_signature() -> None:
    base = valid()
    f0 = base["files"][0]
    with pytest.raises(PatchError, match="not a dotted module inside vllm"):
        patches.parse_patch({**base, "files": [{**f0, "module": "torch.nn"}]}, source="p")
    with pytest.raises(PatchError, match="needs an anchor"):
        patches.parse_patch({**base, "files": [{**f0, "edits": [{"new": "x"}]}]}, source="p")
    with pytest.raises(PatchError, match="does not parse"):
        patches.parse_patch({**base, "files": [{**f0, "edits": [
            {"function": "f", "signature": "(a b)", "old": "a", "new": "b"}]}]}, source="p")


def test_id_must_match_file_name(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(valid()))
    with pytest.raises(PatchError, match="does not match the file name 'other'"):
        patches.load_patch_file(path)


def test_not_yaml_and_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("id: [unclosed\n")
    with pytest.raises(PatchError, match="not valid YAML"):
        patches.load_patch_file(path)
    path.write_text("- a\n- b\n")
    with pytest.raises(PatchError, match="must be a mapping"):
        patches.load_patch_file(path)


def test_unknown_id_suggests_closest() -> None:
    with pytest.raises(PatchError, match="did you mean 'kv-scale-loader-args'"):
        patches.get(["kv-scale-loader-arg"])


def test_get_accepts_a_patch_file_path(tmp_path: Path) -> None:
    path = tmp_path / "kv-scale-loader-args.yaml"
    path.write_text(yaml.safe_dump(valid()))
    assert patches.get([str(path)])[0].source == str(path)


def test_public_api_is_sorted() -> None:
    assert patches.__all__ == sorted(patches.__all__)
