"""A durable tool-use loop on OpenAI's Chat Completions API (the official ``openai`` SDK).

Wire format used: ``POST /v1/chat/completions`` with ``tools`` of ``type: function``
(``name``, ``description``, ``parameters``); the answer's ``choices[0].message`` carries
``tool_calls`` (``id``, ``function.name``, ``function.arguments`` as JSON text) while the model
wants tools; each is answered by a ``role: tool`` message with the same ``tool_call_id``. While
a reader may follow the run live, a turn is asked for with ``stream: true`` (and the usage in
its last chunk) and its text handed on as it arrives (``ledger.live``); the step records the
whole ``ChatCompletion`` all the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger import live
from ledger.engine import RunContext
from ledger.loops.base import (
    ClientFactory,
    Limits,
    Reply,
    Sender,
    ToolCall,
    ToolOutcome,
    run_loop,
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
    wire = _Chat(model=model, params=dict(params or {}))
    wire.tools = [
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
    opening = [{"role": "system", "content": system}] if system else []
    return run_loop(
        ctx,
        wire=wire,
        messages=[*opening, {"role": "user", "content": user}],
        tools=tools,
        limits=limits or Limits(),
        sender=Sender(
            client,
            endpoint=lambda c: c.chat.completions.with_raw_response.create,
            streamed=({"stream": True, "stream_options": {"include_usage": True}}, accumulate),
        ),
        model=model,
        step=step,
    )


def accumulate(chunks: Any) -> Any:
    """The whole ``ChatCompletion`` of a streamed answer (the SDK's
    ``ChatCompletionStreamState`` builds it from the chunks), its text handed to
    ``ledger.live.delta`` as it arrives."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state: Any = ChatCompletionStreamState()
    for chunk in chunks:
        for event in state.handle_chunk(chunk):
            if event.type == "content.delta":
                live.delta(event.delta)
    return state.get_final_completion()


@dataclass
class _Chat:
    model: str
    params: dict[str, Any]
    tools: list[dict[str, Any]] = field(default_factory=list)

    def request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        request |= {"tools": self.tools} if self.tools else {}
        return {**request, **self.params}

    def usage(self, answer: dict[str, Any]) -> tuple[Any, Any]:
        reported = answer.get("usage") or {}
        return reported.get("prompt_tokens"), reported.get("completion_tokens")

    def reply(self, answer: dict[str, Any]) -> Reply:
        choice = (answer.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        said = {"role": "assistant", "content": message.get("content")}
        said |= {"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {}
        return Reply(
            message=said,
            calls=[_tool_call(c) for c in message.get("tool_calls") or []],
            text=message.get("content") or "",
            stop_reason=choice.get("finish_reason"),
        )

    def results(self, outcomes: list[ToolOutcome]) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": o.call.id, "content": o.text} for o in outcomes]


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
