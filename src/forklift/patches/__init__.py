"""patches."""
