"""The public surface of forklift.bench: sorted, and every name real."""

from __future__ import annotations

import forklift.bench as bench


def test_all_is_sorted_and_importable() -> None:
    assert bench.__all__ == sorted(bench.__all__)
    for name in bench.__all__:
        assert getattr(bench, name) is not None, name
