"""PyTorch's CUDA caching allocator, replayed: what ``torch.cuda.memory_allocated`` counts for a sequence of tensor
allocations and frees.

vLLM's "Model loading took" is the growth of ``memory_allocated`` over the load (platforms/cuda.py
get_current_memory_usage @0.26.0), and the allocator counts whole blocks, not the bytes a tensor asked for. The rules
below are the native backend's with the default configuration (no ``PYTORCH_CUDA_ALLOC_CONF``; torch 2.11,
c10/cuda/CUDACachingAllocator.cpp and c10/core/AllocatorConfig.h):

- ``round_size``: a request is rounded up to a multiple of ``kMinBlockSize`` (512 B), and at least 512 B.
- ``get_pool``: requests up to ``kSmallSize`` (1 MiB) come from the small pool, the rest from the large pool.
- ``get_allocation_size``: a new segment (cudaMalloc) is ``kSmallBuffer`` (2 MiB) for small requests,
  ``kLargeBuffer`` (20 MiB) for requests under ``kMinLargeAlloc`` (10 MiB), else the request rounded up to
  ``kRoundLarge`` (2 MiB).
- ``get_free_block``: the smallest cached free block of the pool that holds the request (ties: lowest address).
- ``should_split``: the found block is split when what remains is at least 512 B (small pool) or more than
  ``kSmallSize`` (large pool, and only for requests under ``max_split_size``); otherwise the whole block is handed
  out and counted as allocated.
- ``max_split_size`` (``max_split_size_mb``; SIZE_MAX by default, but vLLM 0.26 loads the model under 20 MiB:
  gpu_worker.py ``_scoped_allocator_max_split``): ``get_free_block`` refuses its best-fit block when the request is
  under the limit and the block is not, or the request is at or over it and the block exceeds it by
  ``kLargeBuffer`` (20 MiB) or more; a new segment is made instead.
- ``free_block``: a freed block merges with free neighbours of its segment (``try_merge_blocks``).
- ``release_cached_blocks`` (``empty_cache``): segments with no allocated block go back to the driver.

Not replayed: several streams, ``roundup_power2_divisions`` / ``expandable_segments``
configurations, garbage-collection thresholds and the out-of-memory retry paths (none is set or reached while
vLLM loads a model on one GPU).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    """round_size: at least kMinBlockSize, else up to a multiple of it."""
    if nbytes < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return -(-nbytes // K_MIN_BLOCK) * K_MIN_BLOCK


def allocation_size(size: int) -> int:
    """get_allocation_size: the segment cudaMalloc'd for a rounded request no cached block holds."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


@dataclass
class Block:
    addr: int
    size: int
    small: bool
    requested: int = 0
    allocated: bool = False
    prev: Block | None = field(default=None, repr=False)
    next: Block | None = field(default=None, repr=False)


class Allocator:
    """One device, one stream. Addresses of new segments are handed out in increasing order (``next_address``),
    or taken from ``segment_at`` when replaying a recorded trace."""

    def __init__(self, max_split_size: int | None = None) -> None:
        self.max_split_size = max_split_size if max_split_size is not None else 1 << 64
        self.pools: dict[bool, list[tuple[int, int]]] = {True: [], False: []}  # small? -> sorted (size, addr)
        self.blocks: dict[int, Block] = {}  # every block by address, free or not
        self.next_address = 1 << 32
        self.segments: dict[int, int] = {}  # segment address -> size

    # --- the pools ---
    def _insert(self, b: Block) -> None:
        bisect.insort(self.pools[b.small], (b.size, b.addr))

    def _remove(self, b: Block) -> None:
        pool = self.pools[b.small]
        del pool[bisect.bisect_left(pool, (b.size, b.addr))]

    # --- the public calls ---
    def malloc(self, nbytes: int, segment_at: int | None = None) -> int:
        """Allocate a tensor of ``nbytes``; returns its address (the key for ``free``)."""
        size = round_size(nbytes)
        small = size <= K_SMALL_SIZE
        pool = self.pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool) and self._may_use(size, pool[i][0]):
            block = self.blocks[pool[i][1]]
            self._remove(block)
        else:
            seg = allocation_size(size)
            addr = segment_at if segment_at is not None else self.next_address
            self.next_address = max(self.next_address, addr + seg + K_SMALL_BUFFER)
            block = Block(addr, seg, small)
            self.blocks[addr] = block
            self.segments[addr] = seg
        remaining = block.size - size
        split = remaining >= K_MIN_BLOCK if small else size < self.max_split_size and remaining > K_SMALL_SIZE
        if split:  # should_split
            rest = Block(block.addr + size, remaining, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self.blocks[rest.addr] = rest
            self._insert(rest)
        block.allocated, block.requested = True, nbytes
        return block.addr

    def _may_use(self, size: int, found: int) -> bool:
        """get_free_block's oversize checks on the best-fit block: under max_split_size no block of at least it;
        at or over it, no block of kLargeBuffer or more beyond the request."""
        if size < self.max_split_size:
            return found < self.max_split_size
        return found < size + K_LARGE_BUFFER

    def free(self, addr: int) -> None:
        block = self.blocks[addr]
        block.allocated, block.requested = False, 0
        for other in (block.prev, block.next):  # try_merge_blocks
            if other is None or other.allocated:
                continue
            self._remove(other)
            if other is block.prev:
                other.size += block.size
                other.next = block.next
                if block.next is not None:
                    block.next.prev = other
                del self.blocks[block.addr]
                block = other
            else:
                block.size += other.size
                block.next = other.next
                if other.next is not None:
                    other.next.prev = block
                del self.blocks[other.addr]
        self._insert(block)

    def seed(self, segments: list[dict[str, Any]]) -> None:
        """Take over segments as torch.cuda.memory._snapshot() lists them (address, total_size, segment_type,
        blocks as [size, requested, state])."""
        for s in segments:
            addr, prev = s["address"], None
            small = s.get("segment_type") == "small"
            self.segments[addr] = s["total_size"]
            for size, requested, state in s["blocks"]:
                b = Block(addr, size, small, prev=prev)
                if prev is not None:
                    prev.next = b
                self.blocks[addr] = b
                if state == "active_allocated":
                    b.allocated, b.requested = True, requested
                else:
                    self._insert(b)
                prev, addr = b, addr + size

    def empty_cache(self) -> None:
        """release_cached_blocks: every segment that is one free block goes back."""
        for small in (True, False):
            for _size, addr in list(self.pools[small]):
                b = self.blocks[addr]
                if b.prev is None and b.next is None:
                    self._remove(b)
                    del self.blocks[addr]
                    del self.segments[addr]

    @property
    def allocated(self) -> int:
        """torch.cuda.memory_allocated: the sizes of the allocated blocks."""
        return sum(b.size for b in self.blocks.values() if b.allocated)

    @property
    def requested(self) -> int:
        """The bytes the live tensors asked for."""
        return sum(b.requested for b in self.blocks.values() if b.allocated)

    @property
    def slack(self) -> int:
        """What memory_allocated counts beyond the live tensors' bytes: 512-B rounding and unsplit remainders."""
        return self.allocated - self.requested


Op = tuple[str, object, int]  # ("alloc", key, nbytes) or ("free", key, 0)


def replay_live(ops: Sequence[Op], allocator: Allocator | None = None) -> tuple[Allocator, dict[object, int]]:
    """Run a program of tensor allocations and frees (keys name the tensors) through the allocator; with it, the
    address of every tensor still live at the end."""
    a = allocator if allocator is not None else Allocator()
    live: dict[object, int] = {}
    for action, key, nbytes in ops:
        if action == "alloc":
            live[key] = a.malloc(nbytes)
        elif action == "free":
            a.free(live.pop(key))
        else:
            raise ValueError(f"unknown allocator op {action!r}")
    return a, live


def replay(ops: Sequence[Op], allocator: Allocator | None = None) -> Allocator:
    """Run a program of tensor allocations and frees (keys name the tensors) through the allocator."""
    return replay_live(ops, allocator)[0]
