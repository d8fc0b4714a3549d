"""The statistical layer's shipped model: small, versioned, pure-Python at run time, reproducible."""

from __future__ import annotations

import json
import math

import pytest

from forklift.doctor import load_categories, load_classifier
from forklift.doctor.classify import FORMAT, Classifier
from forklift.doctor.features import terms, vector, words

from .conftest import REPO

MODEL = REPO / "src" / "forklift" / "doctor" / "data" / "classifier.json"


def test_the_model_file_is_small_and_versioned() -> None:
    assert MODEL.stat().st_size < 600 * 1024
    data = json.loads(MODEL.read_text())
    assert data["format"] == FORMAT and data["version"].startswith("1.")
    assert set(data["classes"]) <= set(load_categories())
    assert data["meta"]["cv"]["by"] == "thread", "cross-validation folds are whole threads"


def test_probabilities_are_a_distribution() -> None:
    clf = load_classifier()
    probs = clf.probabilities("RuntimeError: NCCL error: unhandled system error")
    assert set(probs) == set(clf.classes)
    assert math.isclose(sum(probs.values()), 1.0, rel_tol=1e-9)
    assert all(0.0 <= p <= 1.0 for p in probs.values())


def test_a_wrong_format_is_refused() -> None:
    from forklift.errors import DoctorError

    with pytest.raises(DoctorError, match="format"):
        Classifier({"format": "something-else/9"})


def test_features_ignore_numbers_and_ids_and_split_words() -> None:
    a = terms("Worker 12 died at 0x7f3c05b50d48 on 10.0.0.5:29500")
    b = terms("Worker 987 died at 0xdeadbeef on 192.168.1.2:8000")
    assert a == b
    assert {"actorhandlenotfounderror", "actor", "handle", "found"} <= set(words("ActorHandleNotFoundError"))


def test_vectors_are_unit_length_over_the_vocabulary() -> None:
    clf = load_classifier()
    v = vector("ValueError: No available memory for the cache blocks", clf.idf)
    assert v and math.isclose(sum(x * x for x in v.values()), 1.0, rel_tol=1e-9)


def test_unseen_wordings_of_a_known_class_land_near_it() -> None:
    clf = load_classifier()
    cases = {
        "the huggingface hub answered 401, the repo is gated and my token has no access": "hf_download_or_auth",
        "ray status shows the worker node dead; the raylet missed its heartbeats and gcs removed it":
            "ray_health_timeout",
    }
    for text, cat in cases.items():
        top3 = sorted(clf.probabilities(text).items(), key=lambda kv: -kv[1])[:3]
        assert cat in [c for c, _ in top3], (text, top3)


def test_training_reads_only_measured_data() -> None:
    """The classifier trains on every part already measured (train, held-out, the fresh batches in DEV_BATCHES,
    the older corpus); a fresh batch frozen later stays out until it has been measured and named there."""
    from benchmarks._doctor_corpus import DEV_BATCHES, load_split, out_of_sample_batches, training_items

    split = load_split()
    trained = {it.thread for it in training_items()}
    oos = out_of_sample_batches(split)
    assert oos and not set(oos) & set(DEV_BATCHES)
    for name in oos:
        assert not trained & set(split["fresh_batches"][name]["threads"]), name
    for name in DEV_BATCHES:
        assert set(split["fresh_batches"][name]["threads"]) <= trained, name
    assert set(split["heldout_threads"]) & trained
