"""Integer rounding the planner shares: vLLM's cdiv (utils/math_utils.py) and round_up."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division (vLLM's cdiv: -(a // -b))."""
    return -(-a // b)


def round_up(x: int, m: int) -> int:
    """``x`` rounded up to a multiple of ``m`` (vLLM's round_up)."""
    return cdiv(x, m) * m
