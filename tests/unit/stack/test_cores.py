"""The split of a shared CPU host's cores among the stack members' vLLM-CPU ranks (stack/cores.py)."""

from __future__ import annotations

import pytest

from forklift.stack.cores import Seat, id_list, parse_ids, split

pytestmark = pytest.mark.unit


def test_two_members_on_two_cores_get_one_each_in_start_order() -> None:
    b = split("localhost", [0, 1], [Seat("big", 1), Seat("small", 1)])
    assert b.binds == {"big": "0", "small": "1"} and b.note is None


def test_cores_are_shared_out_per_rank_and_the_remainder_goes_to_the_members_started_first() -> None:
    b = split("h", list(range(16)), [Seat("big", 2), Seat("small", 1)])
    # 16 cores over 3 ranks: 6, 5, 5 (the first rank of the first member takes the odd core)
    assert b.binds == {"big": "0-5|6-10", "small": "11-15"}
    cores = [parse_ids(v) for v in b.binds.values()]
    flat = [c for ids in cores for c in ids]
    assert sorted(flat) == list(range(16)) and len(flat) == len(set(flat))  # disjoint, every core used


def test_a_members_own_setting_wins_and_its_cores_are_left_out() -> None:
    b = split("h", [0, 1, 2, 3], [Seat("big", 1, own="0-1"), Seat("small", 1), Seat("tiny", 1)])
    assert b.kept == {"big": "0-1"} and b.binds == {"small": "2", "tiny": "3"}


def test_the_environment_forklift_runs_in_wins_for_a_local_host() -> None:
    b = split("localhost", [0, 1], [Seat("big", 1), Seat("small", 1)], inherited="1")
    assert b.binds == {} and b.note is not None and "forklift's environment" in b.note


def test_fewer_cores_than_ranks_or_unknown_cores_set_nothing_and_say_why() -> None:
    short = split("h", [0, 1], [Seat("big", 2), Seat("small", 1)])
    assert short.binds == {} and short.note is not None and "3 ranks on 2 free cores" in short.note
    remote = split("gpu1", [], [Seat("big", 1), Seat("small", 1)])
    assert remote.binds == {} and remote.note is not None and "unknown" in remote.note


def test_core_lists_read_and_written_as_vllm_does() -> None:
    assert parse_ids("0-2,5|7") == [0, 1, 2, 5, 7]
    assert parse_ids("auto") == [] and parse_ids("nobind") == []
    assert id_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert id_list([3]) == "3"
