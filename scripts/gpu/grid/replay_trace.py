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

from forklift.plan.allocator import Allocator
from forklift.plan.load_replay import LOAD_MAX_SPLIT


def main() -> None:
    with gzip.open(sys.argv[1], "rt") as f:
        data = json.load(f)
    frames = data["frames"]
    a = Allocator(max_split_size=LOAD_MAX_SPLIT)
    a.seed(data["before"])
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
