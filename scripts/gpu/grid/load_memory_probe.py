"""ON THE DEVICE: where the bytes of vLLM's "Model loading took" go, per storage (a diagnosis, not a grid point).

Runs vLLM's offline engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with a dummy-weight model and
wraps BaseModelLoader.load_model (model_executor/model_loader/base_loader.py @0.26.0): around the load it takes
what DeviceMemoryProfiler takes (gc, empty_cache, memory_allocated: platforms/cuda.py get_current_memory_usage),
records the allocator's history, and after the load compares the growth with the storages the model reaches
(parameters and buffers, grouped by name) and lists the allocated blocks no model tensor owns, with the Python
frames that allocated them. Prints one JSON object and exits without sizing the KV cache.

    python3 scripts/gpu/grid/load_memory_probe.py MODEL_DIR [--quantization X]
"""

from __future__ import annotations

import gc
import json
import os
import sys
from collections import defaultdict

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def main() -> None:
    import torch
    from vllm import LLM
    from vllm.model_executor.model_loader import base_loader

    model_dir = sys.argv[1]
    original = base_loader.BaseModelLoader.load_model

    def wrapped(self, vllm_config, model_config, prefix=""):  # type: ignore[no-untyped-def]
        gc.collect()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        pre = torch.cuda.memory._snapshot()["segments"]  # what the allocator holds when the load starts
        torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")
        model = original(self, vllm_config, model_config, prefix)
        gc.collect()
        torch.cuda.empty_cache()
        after = torch.cuda.memory_allocated()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        report(model, before, after, snap, pre)
        sys.stdout.flush()
        os._exit(0)

    base_loader.BaseModelLoader.load_model = wrapped
    LLM(model=model_dir, load_format="dummy", max_model_len=2048, gpu_memory_utilization=0.2, enforce_eager=True,
        tensor_parallel_size=1)


def report(model, before: int, after: int, snap: dict, pre: list) -> None:  # type: ignore[type-arg]  # type: ignore[no-untyped-def]
    owned: dict[int, tuple[str, int]] = {}
    by_name: dict[str, int] = defaultdict(int)
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        if t.device.type != "cuda":
            continue
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in owned:
            continue
        owned[ptr] = (name, st.nbytes())
        key = name.rsplit(".", 1)[-1]
        by_name[f"{key}:{t.dtype}"] += st.nbytes()
    blocks = []
    for seg in snap["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                blocks.append({"addr": addr, "size": b["size"], "requested": b.get("requested_size", b["size"]),
                               "frames": b.get("frames", [])})
            addr += b["size"]
    owned_blocks = [b for b in blocks if b["addr"] in owned]
    over: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for b in owned_blocks:
        extra = b["size"] - owned[b["addr"]][1]
        if extra > 512:
            name = ".".join(p for p in owned[b["addr"]][0].split(".") if not p.isdigit())
            key = f"{name} {owned[b['addr']][1]} +{extra}"
            over[key][0] += 1
            over[key][1] += extra
    stray = [b for b in blocks if b["addr"] not in owned]
    stray.sort(key=lambda b: -b["size"])
    site: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for b in stray:
        fr = [f"{f['filename'].split('site-packages/')[-1].split('/site/')[-1]}:{f['line']} {f['name']}"
              for f in b["frames"] if "vllm" in f.get("filename", "")][:3]
        key = " <- ".join(fr) or "?"
        site[key][0] += 1
        site[key][1] += b["size"]
    out = {
        "consumed_bytes": after - before, "before": before, "after": after,
        "model_storage_bytes": sum(n for _, n in owned.values()),
        "owned_block_bytes": sum(b["size"] for b in owned_blocks),
        "owned_block_requested": sum(b["requested"] for b in owned_blocks),
        "stray_block_bytes": sum(b["size"] for b in stray), "stray_blocks": len(stray),
        "by_name": dict(sorted(by_name.items(), key=lambda kv: -kv[1])),
        "overshoot": sorted(([k, v[0], v[1]] for k, v in over.items()), key=lambda r: -r[2])[:40],
        "stray_sites": sorted(([k, v[0], v[1]] for k, v in site.items()), key=lambda r: -r[2])[:25],
        "reserved": __import__("torch").cuda.memory_reserved(),
    }
    print("PROBE " + json.dumps(out))
    if os.environ.get("PROBE_TRACE"):  # every allocator event of the load, in order, and the segments after it
        write_trace(os.environ["PROBE_TRACE"], snap, pre)


def write_trace(path: str, snap: dict, pre: list) -> None:  # type: ignore[type-arg]
    """gzip JSON: {"frames": [...], "events": [[action, addr, size, stream, [frame ids]]], "segments": [...]}.

    Frames are the Python frames under vllm/ or torch/ (file:line function), innermost first, interned; the
    segments are the allocator's before and after the load (address, total size, blocks as [size, requested, state])."""
    import gzip

    table: dict[str, int] = {}
    events = []
    for trace in snap.get("device_traces", []):
        for e in trace:
            ids = []
            for x in e.get("frames", []):
                fn = x.get("filename", "")
                if "/vllm/" not in fn and "/torch/" not in fn:
                    continue
                key = f"{fn.rsplit('/site/', 1)[-1].rsplit('site-packages/', 1)[-1]}:{x['line']} {x['name']}"
                ids.append(table.setdefault(key, len(table)))
                if len(ids) == 8:
                    break
            events.append([e["action"], e.get("addr"), e.get("size"), e.get("stream", 0), ids])

    def segs(raw: list) -> list:  # type: ignore[type-arg]
        return [{"address": s["address"], "total_size": s["total_size"], "stream": s.get("stream", 0),
                 "segment_type": s.get("segment_type"),
                 "blocks": [[b["size"], b.get("requested_size", b["size"]), b["state"]] for b in s["blocks"]]}
                for s in raw]
    segments = segs(snap["segments"])
    frames = [k for k, _ in sorted(table.items(), key=lambda kv: kv[1])]
    with gzip.open(path, "wt") as f:
        json.dump({"frames": frames, "events": events, "segments": segments, "before": segs(pre),
                   "max_entries": 400000}, f)

if __name__ == "__main__":
    main()
