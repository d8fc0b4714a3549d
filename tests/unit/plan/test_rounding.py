"""One cdiv / round_up for the planner (plan/rounding.py): the modules that size pages, blocks and padded weights
use it instead of their own copies."""

from __future__ import annotations

import pytest

from forklift.plan import csakv, kvcache, packing, quant_layout, rounding, weights


@pytest.mark.parametrize(("a", "b", "up"), [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (37_376, 576, 65)])
def test_cdiv_and_round_up(a: int, b: int, up: int) -> None:
    assert rounding.cdiv(a, b) == up
    assert rounding.round_up(a, b) == up * b


def test_the_planner_modules_share_one_copy() -> None:
    for module in (csakv, kvcache, packing, quant_layout, weights):
        own = {name for name, f in vars(module).items()
               if name in ("cdiv", "round_up", "_round_up") and f.__module__ != rounding.__name__}
        assert not own, (module.__name__, own)
    assert vars(kvcache)["cdiv"] is vars(weights)["cdiv"] is rounding.cdiv
    assert vars(quant_layout)["round_up"] is vars(csakv)["round_up"] is rounding.round_up


def test_a_csa_page_rounds_to_the_fp8_ds_mla_alignment() -> None:
    """64 rows of 584 bytes = 37,376, padded to a multiple of 576: 65 x 576 = 37,440."""
    assert csakv._page(64, 584) == 37_440
