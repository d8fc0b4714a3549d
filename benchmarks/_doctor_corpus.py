"""The doctor corpus on disk: items, their labels and the train / held-out split (shared by the benchmarks
and the training script; no rule or model code here).

Layout: ``tests/data/doctor/corpus/<stem>.log`` (verbatim failure text) beside ``<stem>.yaml`` (source,
thread, kind, input, category, cause, fix, confidence, ...). ``tests/data/doctor/corpus/split.yaml`` names
the held-out threads. The split unit is the source thread: ``heldout(thread)`` is
``sha256(thread) / 2**256 < HELDOUT_FRACTION``, then, for every category with at least ``MIN_THREADS``
threads and none held out, the thread of that category with the smallest hash is moved to held-out.
The split was written before any rule or model of round 2; ``split.yaml`` freezes it (``check_split``
re-derives it and fails on any difference), and items added later are assigned by the hash alone, except the
frozen fresh batches (``fresh_batches``: collected by symptom and held out whatever their hash, part ``fresh``).

The older corpus stays where it was: ``tests/data/doctor/excerpts`` (in-sample: rules were written from
it) and ``tests/data/doctor/heldout`` (an earlier held-out split; never trained on).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "doctor"
CORPUS = DATA / "corpus"
SPLIT_FILE = CORPUS / "split.yaml"
HELDOUT_FRACTION = 0.25
MIN_THREADS = 4


@dataclass(frozen=True)
class Item:
    stem: str
    text: str
    category: str | None
    thread: str
    part: str  # train | heldout | old-insample | old-heldout
    meta: dict[str, Any] = field(default_factory=dict)


def thread_hash(thread: str) -> float:
    return int(hashlib.sha256(thread.encode()).hexdigest(), 16) / 2**256


def derive_split(labels: dict[str, set[str]]) -> tuple[set[str], dict[str, str]]:
    """Held-out threads from {thread: categories}; also the forced moves {thread: category} with the reason."""
    held = {t for t in labels if thread_hash(t) < HELDOUT_FRACTION}
    by_cat: dict[str, list[str]] = defaultdict(list)
    for t, cats in labels.items():
        for c in cats:
            by_cat[c].append(t)
    forced: dict[str, str] = {}
    for cat in sorted(by_cat):
        threads = by_cat[cat]
        if len(threads) >= MIN_THREADS and not any(t in held for t in threads):
            pick = min(threads, key=thread_hash)
            held.add(pick)
            forced[pick] = cat
    return held, forced


def corpus_meta(folder: Path = CORPUS) -> dict[str, dict[str, Any]]:
    out = {}
    for y in sorted(folder.glob("*.yaml")):
        if y.name == SPLIT_FILE.name:
            continue
        out[y.stem] = yaml.safe_load(y.read_text(encoding="utf-8"))
    return out


def load_split() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SPLIT_FILE.read_text(encoding="utf-8"))
    return data


def fresh_threads(split: dict[str, Any] | None = None) -> set[str]:
    """Threads of the frozen fresh batches (``fresh_batches`` in split.yaml): held out whatever their hash."""
    split = split if split is not None else load_split()
    return {t for batch in (split.get("fresh_batches") or {}).values() for t in batch["threads"]}


def corpus_items(parts: tuple[str, ...] = ("train",)) -> list[Item]:
    """Items of the new corpus in the given parts (``train``, ``heldout``, ``fresh``: a frozen fresh batch)."""
    split = load_split()
    held = set(split["heldout_threads"])
    fresh = fresh_threads(split)
    out = []
    for stem, m in corpus_meta().items():
        part = "fresh" if m["thread"] in fresh else "heldout" if m["thread"] in held else "train"
        if part in parts:
            text = (CORPUS / f"{stem}.log").read_text(encoding="utf-8", errors="replace")
            out.append(Item(stem, text, m["category"], m["thread"], part, m))
    return out


# The older corpus was labelled with round 1's 23 categories; round 2's taxonomy (FORMAT.md of the collected
# corpus) split some out. Items whose signature now has its own category are mapped here, by the signature
# the item was filed under (its expected rule) or, for held-out items (no rule), by the defining message the
# taxonomy names for the category (ibv_modify_qp for rdma_ib_error). The taxonomy lists "undefined symbol"
# under engine_install, and the round-2 collectors filed "no kernel image" there too.
RELABEL = {
    "tp-does-not-divide-heads": "parallel_layout_invalid",
    "pipeline-parallel-unsupported-model": "parallel_layout_invalid",
    "engine-cli-unrecognized-argument": "engine_args_invalid",
    "nccl-ib-verbs-failed": "rdma_ib_error",
    "shm-broadcast-wait": "shm_broadcast_rpc_timeout",
    "unified-memory-rpc-timeout": "shm_broadcast_rpc_timeout",
    "mla-head-dim-unsupported": "attention_backend_unsupported",
    "triton-ptxas-error": "compile_failure",
    "vllm-c-undefined-symbol": "engine_install",
    "torch-abi-undefined-symbol": "engine_install",
    "no-kernel-image": "engine_install",
    "heldout:nccl-799-ibv-modify-qp": "rdma_ib_error",
}


def old_items(folder: str) -> list[Item]:
    """The older corpus: ``excerpts`` (in-sample) or ``heldout``; category None means a healthy log.
    Categories are given in round 2's taxonomy (``RELABEL``)."""
    out = []
    for meta in sorted((DATA / folder).glob("*.source.yaml")):
        m = yaml.safe_load(meta.read_text(encoding="utf-8"))
        stem = meta.name.removesuffix(".source.yaml")
        text = (DATA / folder / f"{stem}.log").read_text(encoding="utf-8", errors="replace")
        thread = str(m.get("cites") or m.get("source"))
        part = "old-insample" if folder == "excerpts" else "old-heldout"
        category = m["expect"]["category"]
        category = RELABEL.get(str(m["expect"].get("rule")), RELABEL.get(f"{folder}:{stem}", category))
        out.append(Item(stem, text, category, thread, part, m))
    return out


# Fresh batches measured once (e, f in round 4, g in round 5, h and i in round 6) and development data since the
# next one was collected (NOTES.md); i joined after its single measurement (issue 29, round 7), whose misses were
# then studied for the category boundaries, so i is in-sample for rules and classifier.
DEV_BATCHES = ("e", "f", "g", "h", "i", "j")


def out_of_sample_batches(split: dict[str, Any] | None = None) -> list[str]:
    """The frozen fresh batches not (yet) trained on: the out-of-sample figure of doctor_accuracy."""
    split = split if split is not None else load_split()
    return [name for name in (split.get("fresh_batches") or {}) if name not in DEV_BATCHES]


def training_items() -> list[Item]:
    """All development data: the round-2 train and held-out parts, the fresh batches already measured
    (DEV_BATCHES) and the older labelled excerpts and held-out batch. A fresh batch added later stays out
    until it has been measured and named in DEV_BATCHES."""
    split = load_split()
    dev_fresh = {t for name in DEV_BATCHES for t in split["fresh_batches"][name]["threads"]}
    items = corpus_items(("train", "heldout")) + [it for it in corpus_items(("fresh",)) if it.thread in dev_fresh]
    items += [it for it in old_items("excerpts") + old_items("heldout") if it.category]
    return sorted(items, key=lambda it: it.stem)
