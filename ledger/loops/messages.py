"""A durable tool-use loop on Anthropic's Messages API (the official ``anthropic`` SDK).

Wire format used: ``POST /v1/messages`` with ``tools`` (``name``, ``description``,
``input_schema``); the answer's ``content`` holds ``text`` and ``tool_use`` blocks and its
``stop_reason`` is ``tool_use`` while the model wants tools; each ``tool_use`` is answered in the
next user message by a ``tool_result`` block with the same ``tool_use_id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ledger.engine import RunContext
from ledger.loops.base import (
    ClientFactory,
    Limits,
    Sender,
    ToolCall,
    Usage,
    check_limits,
    run_tools,
)
from ledger.registry import Tool


def default_client() -> Any:
    """``anthropic.Anthropic()``: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL`` from the
    environment; the SDK retries 408/409/429/5xx (``max_retries``, 2 by default)."""
    import anthropic

    return anthropic.Anthropic()


def messages_loop(
    ctx: RunContext,
    *,
    model: str,
    system: str,
    tools: Sequence[Tool],
    user: str,
    max_tokens: int = 1024,
    params: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    client: ClientFactory = default_client,
    step: str = "chat",
) -> dict[str, Any]:
    """Run the loop to the model's last answer; return ``{"text", "stop_reason", "usage",
    "messages"}`` (``messages``: the whole conversation, as the model saw it).

    Steps: ``<step>.turn.<n>`` (model) and ``<step>.turn.<n>.tools.<i>.<tool>``. ``params`` go
    into every request (``temperature``, ``tool_choice``, …) and so into its hash.
    """
    limits = limits or Limits()
    tool_defs = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters()}
        for t in tools
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    usage = Usage()
    sender = Sender(client, endpoint=_messages)
    with ctx.scope(step):
        while True:
            turn = usage.turns + 1
            check_limits(limits, usage, step_id=f"{step}.turn.{turn}")
            request = {"model": model, "max_tokens": max_tokens, "messages": messages}
            request |= {"system": system} if system else {}
            request |= {"tools": tool_defs} if tool_defs else {}
            answer = ctx.model_request(
                {**request, **(params or {})}, send=sender, model=model, step=f"turn.{turn}"
            )
            reported = answer.get("usage") or {}
            usage.add(
                input_tokens=reported.get("input_tokens"),
                output_tokens=reported.get("output_tokens"),
                attempts=answer.get("attempts"),
            )
            content = answer.get("content") or []
            messages.append({"role": "assistant", "content": content})
            calls = [_tool_call(b) for b in content if b.get("type") == "tool_use"]
            if not calls:
                return {
                    "text": "".join(b.get("text", "") for b in content if b.get("type") == "text"),
                    "stop_reason": answer.get("stop_reason"),
                    "usage": usage.as_dict(limits),
                    "messages": messages,
                }
            outcomes = run_tools(ctx, calls, tools, step=f"turn.{turn}.tools")
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": o.call.id,
                            "content": o.text,
                            **({"is_error": True} if o.is_error else {}),
                        }
                        for o in outcomes
                    ],
                }
            )


def _tool_call(block: Mapping[str, Any]) -> ToolCall:
    arguments = block.get("input")
    return ToolCall(
        id=str(block.get("id", "")),
        name=str(block.get("name", "")),
        arguments=arguments if isinstance(arguments, dict) else None,
    )


def _messages(client: Any) -> Any:
    return client.messages.with_raw_response.create
