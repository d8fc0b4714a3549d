from __future__ import annotations

import pytest

from forklift.errors import NodeError
from forklift.node.profile import GIB, bundled_names, load_profile, parse_profile


def test_bundled_profiles_load() -> None:
    assert {"default", "gb10"} <= set(bundled_names())
    for name in bundled_names():
        assert load_profile(name).name == name


def test_gb10_carries_seed_002_values() -> None:
    p = load_profile("gb10")
    assert p.sysctl == {"vm.swappiness": 100, "vm.vfs_cache_pressure": 1000, "vm.min_free_kbytes": 262144,
                        "vm.dirty_ratio": 5, "vm.dirty_background_ratio": 1}
    assert p.swap is not None and p.swap.size_bytes == 64 * GIB
    assert p.unified_memory and p.guard.required and p.guard.oom_score_adj == -1000
    assert p.guard.drop_metric == "MemFree" and p.guard.drop_below_gib == 10


def test_default_profile_asks_for_no_tuning() -> None:
    p = load_profile("default")
    assert p.sysctl == {} and p.swap is None and not p.unified_memory and not p.guard.required


def test_value_out_of_range_names_file_field_and_range() -> None:
    with pytest.raises(NodeError) as exc:
        parse_profile("name: x\nsysctl: {vm.swappiness: 300}\n", source="mine.yaml")
    assert "mine.yaml" in exc.value.message
    assert "vm.swappiness: 300 is out of range 0..200" in exc.value.message


def test_unknown_sysctl_suggests_the_close_one() -> None:
    with pytest.raises(NodeError, match="did you mean 'vm.swappiness'"):
        parse_profile("name: x\nsysctl: {vm.swapiness: 10}\n", source="mine.yaml")


def test_unknown_field_and_bad_guard_value() -> None:
    with pytest.raises(NodeError, match="swapp: unknown field"):
        parse_profile("name: x\nswapp: {}\n", source="mine.yaml")
    with pytest.raises(NodeError, match="guard.oom_score_adj"):
        parse_profile("name: x\nguard: {oom_score_adj: -2000}\n", source="mine.yaml")


def test_dirty_background_must_stay_below_dirty_ratio() -> None:
    with pytest.raises(NodeError, match="must be below vm.dirty_ratio"):
        parse_profile("name: x\nsysctl: {vm.dirty_ratio: 5, vm.dirty_background_ratio: 5}\n", source="m.yaml")


def test_swap_override() -> None:
    p = load_profile("gb10")
    assert p.with_swap_gib(0).swap is None
    small = p.with_swap_gib(0.5).swap
    assert small is not None and small.size_bytes == 512 << 20 and small.path == "/swapfile-forklift"
    with pytest.raises(NodeError, match="--swap-gib -1"):
        p.with_swap_gib(-1)


def test_unknown_profile_name() -> None:
    with pytest.raises(NodeError, match="did you mean 'gb10'"):
        load_profile("gb1O")
