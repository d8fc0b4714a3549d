"""HERE: replay a load's allocator trace (load_memory_probe.py with PROBE_TRACE) through forklift.plan.allocator.

Starts from the segments the allocator held when the load began (the trace's "before"), feeds every recorded
alloc / free_completed / segment_free in order (new segments at their recorded addresses), and compares each
block's address with the recorded one, then the final allocated bytes and slack with the snapshot after the load.

    PYTHONPATH=src python scripts/gpu/grid/replay_trace.py TRACE.json.gz [--ops]
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter

from forklift.plan.allocator import Allocator, Block


def seed(a: Allocator, segments: list[dict]) -> dict[int, int]:  # type: ignore[type-arg]
    """The allocator's state at the start: each segment's blocks, allocated or free; returns live addr -> size."""
    live: dict[int, int] = {}
    for s in segments:
        addr, prev = s["address"], None
        small = s.get("segment_type") == "small"
        a.segments[s["address"]] = s["total_size"]
        for size, requested, state in s["blocks"]:
            b = Block(addr, size, small, prev=prev)
            if prev is not None:
                prev.next = b
            a.blocks[addr] = b
            if state == "active_allocated":
                b.allocated, b.requested = True, requested
                live[addr] = size
            else:
                a._insert(b)
            prev, addr = b, addr + size
    return live


def main() -> None:
    with gzip.open(sys.argv[1], "rt") as f:
        data = json.load(f)
    frames = data["frames"]
    a = Allocator()
    seed(a, data["before"])
    start_alloc = a.allocated
    pending_segment = None
    wrong = 0
    counts: Counter[str] = Counter()
    for action, addr, size, _stream, fr in data["events"]:
        counts[action] += 1
        if action == "segment_alloc":
            pending_segment = addr
        elif action == "alloc":
            got = a.malloc(size, segment_at=pending_segment)
            pending_segment = None
            if got != addr:
                wrong += 1
                if wrong <= 5:
                    print("address differs", got, addr, size, [frames[i] for i in fr[:3]])
            if "--ops" in sys.argv:
                print("A", size, a.blocks[got].size, frames[fr[0]] if fr else "")
        elif action == "free_completed":
            if addr in a.blocks and a.blocks[addr].allocated:
                a.free(addr)
            if "--ops" in sys.argv:
                print("F", size)
        elif action == "segment_free":
            a.empty_cache()
    after = sum(b[0] for s in data["segments"] for b in s["blocks"] if b[2] == "active_allocated")
    print(json.dumps({"events": dict(counts), "address_mismatches": wrong, "replayed_allocated": a.allocated,
                      "snapshot_allocated": after, "replayed_growth": a.allocated - start_alloc,
                      "replayed_slack": a.slack}))


if __name__ == "__main__":
    main()
