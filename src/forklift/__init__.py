"""forklift: plan, launch, check, benchmark and diagnose vLLM deployments on hardware you own."""

__version__ = "0.1.0"

__all__ = ["__version__"]
