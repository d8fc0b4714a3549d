"""The caching allocator's replay against hand-worked cases of c10/cuda/CUDACachingAllocator.cpp's rules."""

from __future__ import annotations

from forklift.plan.allocator import Allocator, allocation_size, replay, round_size

MIB = 1 << 20


def test_requests_round_to_512_bytes_and_at_least_512() -> None:
    assert [round_size(n) for n in (1, 511, 512, 513, 1536)] == [512, 512, 512, 1024, 1536]
    a = replay([("alloc", "norm", 100), ("alloc", "bias", 513)])
    assert (a.allocated, a.requested, a.slack) == (512 + 1024, 613, 923)


def test_new_segment_sizes() -> None:
    # small pool 2 MiB; 1..10 MiB requests a 20 MiB segment; from 10 MiB up the request rounded to 2 MiB
    assert allocation_size(1 * MIB) == 2 * MIB
    assert allocation_size(1 * MIB + 512) == 20 * MIB
    assert allocation_size(10 * MIB - 512) == 20 * MIB
    assert allocation_size(10 * MIB) == 10 * MIB
    assert allocation_size(11 * MIB + 512) == 12 * MIB


def test_a_large_block_is_not_split_when_at_most_1_mib_would_remain() -> None:
    # 9.5 MiB from a new 20 MiB segment: 10.5 MiB remain, split off. The second 9.5 MiB finds the 10.5 MiB block;
    # 1 MiB would remain, which is not more than kSmallSize: the whole 10.5 MiB block is handed out.
    a = replay([("alloc", 1, 9 * MIB + MIB // 2), ("alloc", 2, 9 * MIB + MIB // 2)])
    assert len(a.segments) == 1
    assert a.allocated == 20 * MIB
    assert a.slack == 1 * MIB


def test_a_large_request_from_its_own_segment_keeps_the_unsplit_tail() -> None:
    # 11.5 MiB: a 12 MiB segment, 0.5 MiB would remain -> one 12 MiB block; 10 MiB + 512: 12 MiB, ~2 MiB split off
    assert replay([("alloc", 1, 11 * MIB + MIB // 2)]).slack == MIB // 2
    assert replay([("alloc", 1, 10 * MIB + 512)]).slack == 0


def test_a_small_block_splits_down_to_512_bytes() -> None:
    # 1 MiB and 1 MiB - 1 KiB from one 2 MiB segment: the 1 KiB left is split off (>= 512 B) and holds 512 B
    a = replay([("alloc", 1, MIB), ("alloc", 2, MIB - 1024), ("alloc", 3, 512)])
    assert (len(a.segments), a.slack) == (1, 0)


def test_best_fit_takes_the_smallest_free_block_that_holds_the_request() -> None:
    # two free blocks, 4 MiB and 6 MiB (each between allocated ones); 3.5 MiB takes the 4 MiB block whole
    ops = [("alloc", "a", 4 * MIB), ("alloc", "x", 2 * MIB), ("alloc", "b", 6 * MIB), ("alloc", "y", 2 * MIB),
           ("free", "a", 0), ("free", "b", 0), ("alloc", "c", 3 * MIB + MIB // 2)]
    a = replay(ops)
    assert a.slack == MIB // 2
    assert a.allocated == 4 * MIB + 2 * MIB + 2 * MIB


def test_freed_neighbours_merge_and_empty_cache_returns_whole_segments() -> None:
    a = Allocator()
    p = [a.malloc(4 * MIB) for _ in range(4)]  # one 20 MiB segment: 4 x 4 MiB + 4 MiB free
    assert len(a.segments) == 1
    a.free(p[1])
    a.free(p[2])
    q = a.malloc(8 * MIB)  # fits only in the merged 8 MiB hole (the tail is 4 MiB)
    assert q == p[1] and a.slack == 0
    for addr in (p[0], p[3], q):
        a.free(addr)
    a.empty_cache()
    assert a.segments == {} and a.allocated == 0
