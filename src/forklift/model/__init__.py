"""Models: where weights live, the bundled model, and (for the planner) their shapes."""
