"""The gateway: one OpenAI-compatible endpoint in front of runs, with keys per person, usage and an audit log."""
