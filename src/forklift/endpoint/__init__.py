"""Talking to a served model, the one way every command does it: a Target (URL, model, key, what the run record
knows), the Endpoint client over httpx (injectable transport), the SSE rules, and the model's tokenizer.

    target = Target.from_record(record)          # or Target.from_url("http://host:8000", api_key_env="KEY")
    with Endpoint.of(target) as ep:
        reply = ep.chat(target.model or ep.discover().model, [{"role": "user", "content": "Hi"}], max_tokens=64)
"""

from forklift.endpoint.auth import api_key, bearer
from forklift.endpoint.client import Discovery, Endpoint
from forklift.endpoint.sse import Chunk, Reply
from forklift.endpoint.target import Target, normalize_url
from forklift.endpoint.tokens import LocalTokenizer, ServerTokenizer, Tokenizer, tokenizer_for

__all__ = ["Chunk", "Discovery", "Endpoint", "LocalTokenizer", "Reply", "ServerTokenizer", "Target", "Tokenizer",
           "api_key", "bearer", "normalize_url", "tokenizer_for"]
