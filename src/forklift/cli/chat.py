"""``forklift chat``: send one prompt to a run and print the answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from forklift.cli.common import JsonOpt, console, err_console, print_json
from forklift.cli.status import load_run

if TYPE_CHECKING:
    from forklift.endpoint import Reply

DEFAULT_MAX_TOKENS = 128


def empty_answer_hint(reply: Reply, max_tokens: int) -> str | None:
    """Why an answer came back empty, when the reply says: the model was still reasoning, or the budget ran out."""
    if reply.content.strip():
        return None
    if reply.reasoning and reply.finish_reason == "length":
        why = f"the model spent all {max_tokens} tokens reasoning (finish_reason length) before answering"
    elif reply.finish_reason == "length":
        why = f"the answer hit the {max_tokens}-token limit (finish_reason length) before any text"
    elif reply.reasoning:
        why = "the model answered only in its reasoning"
    else:
        return None
    return f"empty answer: {why}; raise --max-tokens (for example --max-tokens {max(2048, 4 * max_tokens)})."


def reply_json(prompt: str, reply: Reply, hint: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt": prompt, "answer": reply.content, "finish_reason": reply.finish_reason,
                           "usage": reply.usage}
    if reply.reasoning:
        out["reasoning"] = reply.reasoning
    if hint:
        out["hint"] = hint
    return out


def chat_cmd(
    prompt: Annotated[str, typer.Argument(help="What to ask.")],
    name: Annotated[str | None, typer.Option("--name", "-n", help="Run name.")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Most tokens to generate, reasoning "
                                                                        "included.")] = DEFAULT_MAX_TOKENS,
    json_out: JsonOpt = False,
) -> None:
    """Ask a running deployment one question (greedy) and print the answer."""
    from forklift.endpoint import Endpoint, Target

    target = Target.from_record(load_run(name))
    model = target.model or ""
    with Endpoint.of(target, timeout=120) as endpoint:
        reply = endpoint.chat(model, [{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0)
    hint = empty_answer_hint(reply, max_tokens)
    if json_out:
        print_json(reply_json(prompt, reply, hint))
        return
    console.print(f"[bold]{escape(model)}[/]: {escape(reply.content)}", highlight=False)
    if hint:
        err_console.print(f"[yellow]{hint}[/]", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("chat")(chat_cmd)
