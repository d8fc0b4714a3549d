"""Run one function per host in parallel (concurrent.futures) and keep every host's outcome.

A failure on one host never hides the others: callers get results and errors side by side, keyed by
the same keys they passed in, in the order they passed them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")

MAX_PARALLEL = 16
"""Stay well under sshd's default MaxStartups (10:30:100) per host and our own thread budget."""


@dataclass
class FanOut(Generic[K, R]):
    results: dict[K, R] = field(default_factory=dict)
    errors: dict[K, Exception] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_first(self) -> None:
        """Re-raise the first error in input order (its message already names the host)."""
        for exc in self.errors.values():
            raise exc


def fan_out(items: Iterable[tuple[K, T]], fn: Callable[[T], R], *, max_workers: int = MAX_PARALLEL) -> FanOut[K, R]:
    """Call fn(item) for every (key, item) concurrently; collect results and exceptions per key."""
    pairs = list(items)
    out: FanOut[K, R] = FanOut()
    if not pairs:
        return out
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(pairs)))) as pool:
        futures = [(key, pool.submit(fn, item)) for key, item in pairs]
        for key, fut in futures:
            try:
                out.results[key] = fut.result()
            except Exception as exc:  # noqa: BLE001 - kept per host, re-raised by the caller
                out.errors[key] = exc
    return out
