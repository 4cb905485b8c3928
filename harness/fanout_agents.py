"""Framework agents whose first model answer calls three tools at once, for the adapters'
fan-out tests and kill tests (``ledger.adapters.pydantic_ai``, ``ledger.adapters.openai_agents``).

Both scripted models (offline) answer turn 1 with three tool calls in one answer —
``fetch_invoice`` (a read), ``refund_charge`` (an effect with a lookup), ``notify_team`` (an
effect without one) — and turn 2 with a sentence built from the three results. Each turn a model
is really asked is appended to ``RUNLEDGER_FANOUT_ASKS`` (a file) when set, so a test counts the
asks across processes.

``RUNLEDGER_FANOUT_NOTIFY_FIRST=1`` makes the refund, once sent, wait (for a condition, with a
generous bound) until the note to the team has committed before it reaches
``charge.after_effect``: a worker killed there has then settled every sibling but the refund,
so what the resume must do is the same on every run.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from harness import faults
from ledger import faultpoints
from ledger.agents import RunContext, agent
from ledger.examples.agents import fetch_invoice, notify_team, refund_charge

TOOLS = [fetch_invoice, refund_charge, notify_team]
PROMPT = "Please refund invoice inv_1001 and tell #billing."
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("fetch_invoice", {"invoice_id": "inv_1001"}),
    ("refund_charge", {"customer": "cus_ada", "amount_cents": 4200}),
    ("notify_team", {"channel": "#billing", "text": "refunding inv_1001"}),
]
FINAL = "Refunded 4200 cents to cus_ada for inv_1001 (total 4200) and told #billing."


def final(results: dict[str, Any]) -> str:
    """Turn 2's answer: built from the three tool results, so a wrong replay shows in it."""
    invoice, refund, note = (results[name] for name, _ in CALLS)
    told = f"told {note['channel']}" if "channel" in note else f"did not: {note.get('denied')}"
    return (
        f"Refunded {-refund['amount_cents']} cents to {refund['customer']} for "
        f"{invoice['invoice_id']} (total {invoice['total_cents']}) and {told}."
    )


def _asked(turn: int) -> None:
    path = os.environ.get("RUNLEDGER_FANOUT_ASKS")
    if path:
        with open(path, "a") as f:
            f.write(f"{turn}\n")
    faultpoints.point("fanout.model")


def _notify_committed() -> None:
    from ledger.models import Step

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if Step.objects.filter(tool="notify_team", status="succeeded").exists():
            return
        time.sleep(0.02)  # polling a condition, bounded: not a timing assumption


if os.environ.get("RUNLEDGER_FANOUT_NOTIFY_FIRST"):
    faults.set_hook("charge.after_effect", _notify_committed)


# --- PydanticAI --------------------------------------------------------------------------------


def pydantic_model(messages: list[Any], info: Any) -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

    turn = 1 + sum(isinstance(m, ModelResponse) for m in messages)
    _asked(turn)
    if turn == 1:
        return ModelResponse(
            parts=[ToolCallPart(name, args, f"call-{i}") for i, (name, args) in enumerate(CALLS)]
        )
    results = {}
    for message in messages:
        for part in getattr(message, "parts", []):
            if getattr(part, "part_kind", "") != "tool-return":
                continue
            content = part.content
            if getattr(part, "outcome", None) == "denied":  # PydanticAI's denial of a call
                results[part.tool_name] = {"denied": content}
            else:
                results[part.tool_name] = (
                    json.loads(content) if isinstance(content, str) else content
                )
    return ModelResponse(parts=[TextPart(final(results))])


def pydantic_agent() -> Any:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.models.function import FunctionModel

    return PydanticAgent(FunctionModel(pydantic_model), instructions="Refund and tell the team.")


@agent("fanout_pydantic_ai", plan_version="1", divergence="refuse", max_resumes=5, tools=TOOLS)
def fanout_pydantic_ai(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    from ledger.adapters.pydantic_ai import run_agent

    return {"text": run_agent(ctx, pydantic_agent(), PROMPT, tools=TOOLS)}


# --- OpenAI Agents SDK -------------------------------------------------------------------------


def openai_agent() -> Any:
    from agents import Agent as SDKAgent
    from agents import Model, ModelProvider, ModelResponse, Usage, set_tracing_disabled
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage
    from openai.types.responses.response_output_text import ResponseOutputText

    from ledger.adapters import openai_agents

    set_tracing_disabled(True)

    class Scripted(Model):
        async def get_response(  # type: ignore[override]
            self, system: Any, input: Any, *args: Any, **kw: Any
        ) -> Any:
            items = [] if isinstance(input, str) else list(input)
            outputs = {
                _get(i, "call_id"): _get(i, "output")
                for i in items
                if _get(i, "type") == "function_call_output"
            }
            turn = 1 if not outputs else 2
            _asked(turn)
            output: list[Any]
            if turn == 1:
                output = [
                    ResponseFunctionToolCall(
                        type="function_call", call_id=f"c{i}", name=name, arguments=json.dumps(a)
                    )
                    for i, (name, a) in enumerate(CALLS)
                ]
            else:
                results = {name: json.loads(outputs[f"c{i}"]) for i, (name, _) in enumerate(CALLS)}
                text = ResponseOutputText(type="output_text", text=final(results), annotations=[])
                output = [
                    ResponseOutputMessage(
                        id="msg",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[text],
                    )
                ]
            usage = Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
            return ModelResponse(output=output, usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    class Provider(ModelProvider):
        def get_model(self, model_name: str | None) -> Model:
            return Scripted()

    sdk_agent = SDKAgent(
        name="fanout",
        instructions="Refund and tell the team.",
        model="scripted",
        tools=[openai_agents.function_tool(t) for t in TOOLS],
    )
    return sdk_agent, Provider()


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


@agent("fanout_openai_agents", plan_version="1", divergence="refuse", max_resumes=5, tools=TOOLS)
def fanout_openai_agents(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    from ledger.adapters import openai_agents

    sdk_agent, provider = openai_agent()
    result = openai_agents.run(ctx, sdk_agent, PROMPT, model_provider=provider)
    return {"text": result.final_output}
