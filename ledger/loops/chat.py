"""A durable tool-use loop on OpenAI's Chat Completions API (the official ``openai`` SDK).

Wire format used: ``POST /v1/chat/completions`` with ``tools`` of ``type: function``
(``name``, ``description``, ``parameters``); the answer's ``choices[0].message`` carries
``tool_calls`` (``id``, ``function.name``, ``function.arguments`` as JSON text) while the model
wants tools; each is answered by a ``role: tool`` message with the same ``tool_call_id``.
"""

from __future__ import annotations

import json
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
    """``openai.OpenAI()``: ``OPENAI_API_KEY``, ``OPENAI_BASE_URL`` from the environment; the
    SDK retries 408/409/429/5xx (``max_retries``, 2 by default)."""
    import openai

    return openai.OpenAI()


def chat_loop(
    ctx: RunContext,
    *,
    model: str,
    system: str,
    tools: Sequence[Tool],
    user: str,
    params: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    client: ClientFactory = default_client,
    step: str = "chat",
) -> dict[str, Any]:
    """Run the loop to the model's last answer; return ``{"text", "stop_reason", "usage",
    "messages"}``. Steps as in ``ledger.loops.messages.messages_loop``."""
    limits = limits or Limits()
    tool_defs = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters(),
            },
        }
        for t in tools
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    usage = Usage()
    sender = Sender(client, endpoint=_completions)
    with ctx.scope(step):
        while True:
            turn = usage.turns + 1
            check_limits(limits, usage, step_id=f"{step}.turn.{turn}")
            request: dict[str, Any] = {"model": model, "messages": messages}
            request |= {"tools": tool_defs} if tool_defs else {}
            answer = ctx.model_request(
                {**request, **(params or {})}, send=sender, model=model, step=f"turn.{turn}"
            )
            reported = answer.get("usage") or {}
            usage.add(
                input_tokens=reported.get("prompt_tokens"),
                output_tokens=reported.get("completion_tokens"),
                attempts=answer.get("attempts"),
            )
            choice = (answer.get("choices") or [{}])[0]
            message = choice.get("message") or {}
            said = {"role": "assistant", "content": message.get("content")}
            said |= {"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {}
            messages.append(said)
            calls = [_tool_call(c) for c in message.get("tool_calls") or []]
            if not calls:
                return {
                    "text": message.get("content") or "",
                    "stop_reason": choice.get("finish_reason"),
                    "usage": usage.as_dict(limits),
                    "messages": messages,
                }
            for outcome in run_tools(ctx, calls, tools, step=f"turn.{turn}.tools"):
                messages.append(
                    {"role": "tool", "tool_call_id": outcome.call.id, "content": outcome.text}
                )


def _tool_call(call: Mapping[str, Any]) -> ToolCall:
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = None
    return ToolCall(
        id=str(call.get("id", "")),
        name=str(function.get("name", "")),
        arguments=arguments if isinstance(arguments, dict) else None,
    )


def _completions(client: Any) -> Any:
    return client.chat.completions.with_raw_response.create
