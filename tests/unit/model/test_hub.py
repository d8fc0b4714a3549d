"""The Hub client (forklift.model.hub) and the pull's file choice, against the local Hub in a thread."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from forklift import recipe as recipes
from forklift.distribution.modelfiles import INDEX, index_map, selection
from forklift.distribution.pull import choose_mode, pull_recipe, wanted_files
from forklift.errors import HubError
from forklift.model import hub
from tests.hubserver import HubServer, git_blob_id
from tests.modelgen import expected_files
from tests.unit.model.conftest import TOKEN


def test_snapshot_lists_every_file_with_its_hub_hash(hub_server: HubServer) -> None:
    snap = hub.snapshot("org/tiny", None, hf_token=TOKEN)
    repo = hub_server.repos["org/tiny"]
    assert snap.commit == repo.commit and snap.revision == "main"
    for f in snap.files:
        data = (repo.folder / f.name).read_bytes()
        assert f.size == len(data)
        if f.name.endswith(".safetensors"):
            assert f.sha256 == hashlib.sha256(data).hexdigest() and f.blob_id is None
        else:
            assert f.sha256 is None and f.blob_id == git_blob_id(data)
    assert hub.snapshot("org/tiny", repo.commit, hf_token=TOKEN).commit == repo.commit


def test_errors_say_what_to_do_and_never_carry_the_token(hub_server: HubServer) -> None:
    with pytest.raises(HubError) as no_token:
        hub.snapshot("org/tiny", None, hf_token=None)
    assert "HF_TOKEN" in (no_token.value.fix or "")
    with pytest.raises(HubError) as bad_rev:
        hub.snapshot("org/tiny", "v9", hf_token=TOKEN)
    assert "no such revision" in str(bad_rev.value)
    with pytest.raises(HubError) as missing:
        hub.snapshot("org/absent", None, hf_token=TOKEN)
    assert "not found" in str(missing.value)
    for err in (no_token.value, bad_rev.value, missing.value):
        assert TOKEN not in f"{err} {err.fix}"
    assert all(not r["auth"] for r in hub_server.requests[:1])  # the first call sent no token at all


def test_token_comes_from_hf_token_then_the_login(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_TOKEN", "from-env")
    assert hub.token() == "from-env"
    monkeypatch.delenv("HF_TOKEN")
    import huggingface_hub.constants as constants

    token_file = tmp_path / "token"
    token_file.write_text("from-login\n")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(token_file))
    assert hub.token() == "from-login"


def test_parse_ref() -> None:
    assert hub.parse_ref("zai-org/GLM-4.7") == ("zai-org/GLM-4.7", None)
    assert hub.parse_ref("zai-org/GLM-4.7@v1.0") == ("zai-org/GLM-4.7", "v1.0")
    for bad in ("GLM-4.7", "/models/x", "a/b/c", "org/"):
        with pytest.raises(HubError):
            hub.parse_ref(bad)


def test_pp3_selection_from_hub_metadata_gives_each_node_its_stage(hub_server: HubServer) -> None:
    snap = hub.snapshot("org/tiny", None, hf_token=TOKEN)
    small = hub.small_files(snap, ["config.json", INDEX], hf_token=TOKEN)
    names = wanted_files(snap, small[INDEX])
    assert "pytorch_model.bin" not in names and ".gitattributes" not in names  # vLLM loads the indexed shards
    r = recipes.load("default", ["model.source=org/tiny", "parallel.pp=3",
                                 "nodes=[{host: a}, {host: b}, {host: c}]"])
    need = selection(r, names, small["config.json"], index_map(small[INDEX]))
    assert [need[i] for i in range(3)] == [expected_files(i) for i in range(3)]
    assert choose_mode(need, snap.sizes, None) == ("each", None)  # disjoint stages: every node pulls its own
    same = selection(r.model_copy(update={"parallel": r.parallel.model_copy(update={"pp": 1, "tp": 3})}),
                     names, small["config.json"], index_map(small[INDEX]))
    assert choose_mode(same, snap.sizes, None) == ("via", 0)  # the same files everywhere: pull once, fan out
    assert choose_mode(need, snap.sizes, 2) == ("via", 2)


def test_pull_recipe_checks_the_id_against_the_recipe() -> None:
    r, repo, rev = pull_recipe("org/tiny@main", None)
    assert (repo, rev, [n.host for n in r.nodes]) == ("org/tiny", "main", ["localhost"])
    other = recipes.load("default", ["model.source=org/other"])
    with pytest.raises(HubError, match="serves org/other"):
        pull_recipe("org/tiny", other)
    pinned = recipes.load("default", ["model.source=org/tiny", "model.revision=abc"])
    assert pull_recipe("org/tiny", pinned)[2] == "abc"
