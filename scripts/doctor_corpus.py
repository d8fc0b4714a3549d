"""Import the collected doctor corpus into tests/data/doctor/corpus/ and write (or check) the split.

    python scripts/doctor_corpus.py import DIR...   # copy <stem>.log/.yaml pairs, repairing YAML, tagging `collector`
    python scripts/doctor_corpus.py split           # write tests/data/doctor/corpus/split.yaml (first time only)
    python scripts/doctor_corpus.py check           # re-derive the split and compare; list categories and counts

Items added after the split was frozen (failures caused on purpose, GPU logs) are assigned by the hash alone
and listed under ``added_after`` in split.yaml (held-out ones are also added to ``heldout_threads``). A fresh batch
collected by symptom is frozen under ``fresh_batches`` (held out whatever its hash; part ``fresh``).

Import refuses a thread already present (in the corpus or in the older tests/data/doctor corpora) and an
unknown category. Repair: a few collected YAML files carry an unquoted ': ' inside cause/fix; each line
``key: value`` of a known key is read as one string, so the text is kept exactly.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path
from typing import get_args

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from benchmarks._doctor_corpus import (  # noqa: E402
    CORPUS,
    MIN_THREADS,
    SPLIT_FILE,
    corpus_meta,
    derive_split,
    fresh_threads,
    old_items,
    thread_hash,
)

from forklift.doctor.findings import Category  # noqa: E402

KEYS = ("source", "thread", "kind", "input", "category", "cause", "fix", "confidence", "vllm_version",
        "hardware", "collected", "collector", "note")
CATEGORIES = list(get_args(Category))


def read_meta(path: Path) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        if isinstance(data, dict):
            return {k: str(v) for k, v in data.items()}
    except yaml.YAMLError:
        pass
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+): (.*)$", line)
        if not m or m.group(1) not in KEYS:
            raise SystemExit(f"{path}: cannot read line {line!r}")
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = str(yaml.safe_load(value))
        out[m.group(1)] = value
    return out


def known_threads() -> dict[str, str]:
    seen = {str(m["thread"]).lower(): stem for stem, m in corpus_meta().items()}
    for folder in ("excerpts", "heldout"):
        for it in old_items(folder):
            seen[it.thread.lower()] = f"{folder}/{it.stem}"
            seen[str(it.meta.get("source", "")).split("#")[0].rstrip("/").lower()] = f"{folder}/{it.stem}"
    return seen


def do_import(folders: list[str]) -> None:
    seen = known_threads()
    added = 0
    for folder in map(Path, folders):
        collector = folder.name
        for y in sorted(folder.glob("*.yaml")):
            meta = read_meta(y)
            log = y.with_suffix(".log")
            if meta["category"] not in CATEGORIES:
                raise SystemExit(f"{y}: unknown category {meta['category']}")
            src = meta["source"].split("#")[0].rstrip("/").lower()
            dup = seen.get(meta["thread"].lower()) or seen.get(src)
            if dup and not dup.startswith(collector + ":"):
                print(f"skip {y.name}: thread {meta['thread']} already in {dup}")
                continue
            meta.setdefault("collector", collector)
            out = {k: meta[k] for k in KEYS if k in meta}
            (CORPUS / f"{y.stem}.yaml").write_text(
                yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=1000), encoding="utf-8")
            (CORPUS / f"{y.stem}.log").write_bytes(log.read_bytes())
            seen[meta["thread"].lower()] = f"{collector}:{y.stem}"
            seen[src] = f"{collector}:{y.stem}"
            added += 1
    print(f"imported {added}")


def labels() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m in corpus_meta().values():
        out.setdefault(str(m["thread"]), set()).add(str(m["category"]))
    return out


def write_split() -> None:
    if SPLIT_FILE.exists():
        raise SystemExit(f"{SPLIT_FILE} exists: the split is frozen (use 'check')")
    held, forced = derive_split(labels())
    data = {
        "rule": ("held out when sha256(thread)/2**256 < 0.25; then for each category with >= "
                 f"{MIN_THREADS} threads and none held out, its thread with the smallest hash is held out too"),
        "written_before_rules": True,
        "forced": dict(sorted(forced.items())),
        "heldout_threads": sorted(held),
    }
    SPLIT_FILE.write_text(yaml.safe_dump(data, sort_keys=False, width=1000), encoding="utf-8")
    print(f"held out {len(held)} of {len(labels())} threads ({len(forced)} forced)")


def check() -> int:
    split = yaml.safe_load(SPLIT_FILE.read_text(encoding="utf-8"))
    fresh = fresh_threads(split)
    frozen = set(split["heldout_threads"])
    added = dict(split.get("added_after", {}))
    lab = labels()
    bad = [t for t in frozen | fresh if t not in lab]
    late = {t for t in lab if t not in frozen and t not in fresh and thread_hash(t) < 0.25}
    wrong = {t for t, part in added.items() if (part == "heldout") != (thread_hash(t) < 0.25)}
    unassigned = {t for t in lab if t.startswith("caused:") and t not in added}
    if bad or late or wrong or unassigned:
        print(f"split mismatch: frozen threads missing {bad}; hash says held out but not frozen {sorted(late)}; "
              f"added items against the hash {sorted(wrong)}; items added without an assignment {sorted(unassigned)}")
        return 1
    per: Counter[tuple[str, str]] = Counter()
    for m in corpus_meta().values():
        part = "fresh" if m["thread"] in fresh else "heldout" if m["thread"] in frozen else "train"
        per[(str(m["category"]), part)] += 1
    for c in sorted({c for c, _ in per}):
        print(f"{c:36s} train {per[(c, 'train')]:3d}  heldout {per[(c, 'heldout')]:3d}  fresh {per[(c, 'fresh')]:3d}")
    print(f"threads {len(lab)}, held out {len(frozen & set(lab))}, fresh {len(fresh & set(lab))}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["import"]:
        do_import(argv[1:])
        return 0
    if argv[:1] == ["split"]:
        write_split()
        return 0
    if argv[:1] == ["check"]:
        return check()
    print(__doc__)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
