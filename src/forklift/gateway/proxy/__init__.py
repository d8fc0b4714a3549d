"""Code that runs inside the gateway process (LiteLLM's proxy, in its own environment): imports nothing from
forklift; ``forklift gateway up`` copies it next to the proxy's config."""
