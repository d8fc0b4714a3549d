"""``forklift chat``: send one prompt to a run and print the answer."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from forklift import record as records
from forklift.cli.common import JsonOpt, console, print_json
from forklift.errors import ForkliftError


def chat_cmd(
    prompt: Annotated[str, typer.Argument(help="What to ask.")],
    name: Annotated[str | None, typer.Option("--name", "-n", help="Run name.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1)] = 128,
    json_out: JsonOpt = False,
) -> None:
    """Ask a running deployment one question (greedy) and print the answer."""
    import openai

    rec = records.load(records.resolve_name(name))
    key = os.environ.get(rec.api_key_env, "") if rec.api_key_env else "none"
    client = openai.OpenAI(base_url=f"{rec.endpoint}/v1", api_key=key or "none", timeout=120)
    try:
        resp = client.chat.completions.create(
            model=rec.served_name, messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens, temperature=0,
        )
    except openai.OpenAIError as exc:
        raise ForkliftError(f"{rec.name}: request failed: {exc}",
                            fix=f"Check the run with `forklift status {rec.name}`.") from exc
    answer = resp.choices[0].message.content or ""
    if json_out:
        print_json({"prompt": prompt, "answer": answer, "finish_reason": resp.choices[0].finish_reason,
                    "usage": resp.usage.model_dump() if resp.usage else None})
    else:
        console.print(f"[bold]{rec.served_name}[/]: {answer}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("chat")(chat_cmd)
