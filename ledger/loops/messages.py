"""A durable tool-use loop on Anthropic's Messages API (the official ``anthropic`` SDK).

Wire format used: ``POST /v1/messages`` with ``tools`` (``name``, ``description``,
``input_schema``); the answer's ``content`` holds ``text`` and ``tool_use`` blocks and its
``stop_reason`` is ``tool_use`` while the model wants tools; each ``tool_use`` is answered in the
next user message by a ``tool_result`` block with the same ``tool_use_id``. While a reader may
follow the run live, a turn is asked for with ``stream: true`` and its text handed on as it
arrives (``ledger.live``); the step records the whole ``Message`` all the same.
"""

from __future__ import annotations

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
    wire = _Messages(model=model, max_tokens=max_tokens, system=system, params=dict(params or {}))
    wire.tools = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters()}
        for t in tools
    ]
    return run_loop(
        ctx,
        wire=wire,
        messages=[{"role": "user", "content": user}],
        tools=tools,
        limits=limits or Limits(),
        sender=Sender(
            client,
            endpoint=lambda c: c.messages.with_raw_response.create,
            streamed=({"stream": True}, accumulate),
        ),
        model=model,
        step=step,
    )


def accumulate(events: Any) -> Any:
    """The whole ``Message`` of a streamed answer (the SDK's ``MessageStream`` builds it from
    the events), its text handed to ``ledger.live.delta`` as it arrives."""
    from anthropic import NOT_GIVEN
    from anthropic.lib.streaming import MessageStream

    with MessageStream(events, output_format=NOT_GIVEN) as stream:
        for text in stream.text_stream:
            live.delta(text)
        return stream.get_final_message()


@dataclass
class _Messages:
    model: str
    max_tokens: int
    system: str
    params: dict[str, Any]
    tools: list[dict[str, Any]] = field(default_factory=list)

    def request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        request = {"model": self.model, "max_tokens": self.max_tokens, "messages": messages}
        request |= {"system": self.system} if self.system else {}
        request |= {"tools": self.tools} if self.tools else {}
        return {**request, **self.params}

    def usage(self, answer: dict[str, Any]) -> tuple[Any, Any]:
        reported = answer.get("usage") or {}
        return reported.get("input_tokens"), reported.get("output_tokens")

    def reply(self, answer: dict[str, Any]) -> Reply:
        content = answer.get("content") or []
        return Reply(
            message={"role": "assistant", "content": content},
            calls=[_tool_call(b) for b in content if b.get("type") == "tool_use"],
            text="".join(b.get("text", "") for b in content if b.get("type") == "text"),
            stop_reason=answer.get("stop_reason"),
        )

    def results(self, outcomes: list[ToolOutcome]) -> list[dict[str, Any]]:
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": o.call.id,
                "content": o.text,
                **({"is_error": True} if o.is_error else {}),
            }
            for o in outcomes
        ]
        return [{"role": "user", "content": blocks}]


def _tool_call(block: Mapping[str, Any]) -> ToolCall:
    arguments = block.get("input")
    return ToolCall(
        id=str(block.get("id", "")),
        name=str(block.get("name", "")),
        arguments=arguments if isinstance(arguments, dict) else None,
    )
