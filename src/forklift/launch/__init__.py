"""Turn a recipe (and its plan) into the exact per-rank commands."""
