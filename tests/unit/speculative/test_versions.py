"""Which methods and keys a vLLM release has (facts read off vllm/config/speculative.py of each release)."""

from __future__ import annotations

import pytest

from forklift.speculative import versions


@pytest.mark.parametrize(("section", "name", "version", "present"), [
    ("methods", "ngram_gpu", "0.17.0", False), ("methods", "ngram_gpu", "0.18.0", True),
    ("methods", "dspark", "0.21.0", False), ("methods", "dspark", "0.26.0", True),
    ("methods", "dflash", "0.19.0", False), ("methods", "dflash", "0.20.0", True),
    ("methods", "medusa", "0.32.0", True), ("methods", "medusa", "0.33.0", False),
    ("methods", "suffix", "0.11.0", False), ("methods", "suffix", "0.14.0", True),
    ("keys", "kv_cache_dtype", "0.21.0", False), ("keys", "kv_cache_dtype", "0.26.0", True),
    ("keys", "disable_by_batch_size", "0.16.0", True), ("keys", "disable_by_batch_size", "0.17.0", False),
    ("keys", "speculative_token_tree", "0.20.0", True), ("keys", "speculative_token_tree", "0.21.0", False),
    ("keys", "parallel_drafting", "0.14.0", False), ("keys", "parallel_drafting", "0.16.0", True),
    ("keys", "draft_sample_method", "0.20.0", False), ("keys", "draft_sample_method", "0.21.0", True),
    ("aliases", "glm4_moe_mtp", "0.11.0", False), ("aliases", "glm4_moe_mtp", "0.14.0", True),
])
def test_presence_by_release(section: versions.Section, name: str, version: str, present: bool) -> None:
    assert versions.has(section, name, versions.release(version, "0.26.0")) is present


def test_an_unread_release_between_two_read_ones_takes_the_older_tables() -> None:
    rel = versions.release("0.15.1", "0.26.0")  # no sdist of 0.15 on PyPI: bracketed by 0.14 and 0.16
    assert rel.known and not versions.has("keys", "parallel_drafting", rel)


def test_cpu_build_suffix_is_ignored() -> None:
    rel = versions.release("0.32.0+cpu", "0.26.0")
    assert rel.key == (0, 32, 0) and rel.known


@pytest.mark.parametrize("text", ["0.1.dev16581+gdda4668b5", "9.0.0", "main"])
def test_builds_the_tables_cannot_place_use_the_newest(text: str) -> None:
    rel = versions.release(text, "0.26.0")
    assert not rel.known and rel.key == versions.newest_read()


def test_no_version_means_the_default() -> None:
    assert versions.release(None, "0.26.0").key == (0, 26, 0)


def test_missing_names_say_when_they_came_or_went() -> None:
    assert versions.why_missing("methods", "dspark", versions.release("0.21.0", "0.26.0")) == "added in vLLM 0.25.0"
    assert versions.why_missing("methods", "medusa", versions.release("0.33.0", "0.26.0")) == "removed in vLLM 0.33.0"
