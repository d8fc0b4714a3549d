"""Benchmarks: scripts that measure, never assert. Each writes JSON under bench-results/ (gitignored).

Run one with ``python -m benchmarks.<name>``, or all with ``python -m benchmarks.run`` (``make bench``).
"""
