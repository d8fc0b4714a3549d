"""forklift's own version (a base module: anything may import it; the package root re-exports it)."""

__version__ = "0.1.0"
