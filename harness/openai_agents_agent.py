"""An OpenAI Agents SDK agent on the ledger, with a scripted fake SDK ``Model`` (offline), for
the adapter's tests, kill tests and bench (``ledger.adapters.openai_agents``).

The fake model answers from the conversation it is given: turn 1 fetches two invoices in
parallel (a plain SDK tool: a read), turn 2 refunds both in parallel (``refund_charge``, an
effect with a lookup), turn 3 tells the team (``notify_team``, an effect without one), turn 4
answers. Each request it receives (``sent <turn>``) and each it answers (``<turn>``) is appended
to ``RUNLEDGER_OA_ASKS`` (a file) when set, so a test counts how often each turn was asked
across processes; ``oa.model`` is a fault point inside the request, between the two.
"""

from __future__ import annotations

import json
import os
from typing import Any

from agents import Agent as SDKAgent
from agents import (
    GuardrailFunctionOutput,
    Model,
    ModelProvider,
    ModelResponse,
    Usage,
    function_tool,
    input_guardrail,
    set_tracing_disabled,
)
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage
from openai.types.responses.response_output_text import ResponseOutputText

from ledger import faultpoints
from ledger.adapters import openai_agents
from ledger.agents import RunContext, agent
from ledger.examples.agents import INVOICES, notify_team, refund_charge

SYSTEM = {
    "1": "You settle refunds: fetch the invoices, refund each, tell the team, then summarise.",
    "2": "You settle refunds carefully: fetch, refund, tell the team, then summarise.",
}
set_tracing_disabled(True)  # offline: no trace export to OpenAI

FINAL = "Refunded inv_1001 and inv_1003 and told the team."


@function_tool
def fetch_invoice(invoice_id: str) -> dict[str, Any]:
    """Look an invoice up in the billing system."""
    faultpoints.point("fetch_invoice")
    return {"invoice_id": invoice_id, **INVOICES[invoice_id]}


@input_guardrail
def on_topic(ctx: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
    """A guardrail: refund requests only."""
    faultpoints.point("oa.guardrail")
    text = input if isinstance(input, str) else json.dumps(input)
    return GuardrailFunctionOutput(
        output_info={"refund": "refund" in text}, tripwire_triggered="refund" not in text
    )


def _call(call_id: str, name: str, **arguments: Any) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=json.dumps(arguments)
    )


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_final",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class ScriptedModel(Model):
    """A fake SDK ``Model``: the turn is the number of tool results it has been given."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [] if isinstance(input, str) else list(input)
        results = sum(1 for i in items if _get(i, "type") == "function_call_output")
        turn = {0: 1, 2: 2, 4: 3, 5: 4}[results]
        _note(f"sent {turn}")
        faultpoints.point("oa.model")  # inside a model request
        _note(str(turn))  # answered
        output: list[Any]
        if turn == 1:
            output = [
                _call("c1", "fetch_invoice", invoice_id="inv_1001"),
                _call("c2", "fetch_invoice", invoice_id="inv_1003"),
            ]
        elif turn == 2:
            output = [
                _call("c3", "refund_charge", customer="cus_ada", amount_cents=4200),
                _call("c4", "refund_charge", customer="cus_linus", amount_cents=990),
            ]
        elif turn == 3:
            output = [_call("c5", "notify_team", channel="#billing", text="refunded 2 invoices")]
        else:
            output = [_message(FINAL)]
        usage = Usage(
            requests=1, input_tokens=10 * turn, output_tokens=5, total_tokens=10 * turn + 5
        )
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _note(line: str) -> None:
    asks = os.environ.get("RUNLEDGER_OA_ASKS")
    if asks:
        with open(asks, "a") as f:
            f.write(f"{line}\n")


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


class ScriptedProvider(ModelProvider):
    def get_model(self, model_name: str | None) -> Model:
        return ScriptedModel()


def refund_agent(prompt: str = "2") -> SDKAgent[Any]:
    """The SDK agent (``RUNLEDGER_EXAMPLE_PROMPT`` picks its instructions' version)."""
    return SDKAgent(
        name="refunds",
        instructions=SYSTEM[prompt],
        model="scripted",
        tools=[
            fetch_invoice,
            openai_agents.function_tool(refund_charge),
            openai_agents.function_tool(notify_team),
        ],
        input_guardrails=[on_topic],
    )


@agent(
    "oa_refunds",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=openai_agents.ledger_tools(refund_agent()),
)
def oa_refunds(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Refund two invoices with an OpenAI Agents SDK agent run durably."""
    result = openai_agents.run(
        ctx,
        refund_agent(os.environ.get("RUNLEDGER_EXAMPLE_PROMPT", "2")),
        "Please refund invoices inv_1001 and inv_1003.",
        model_provider=ScriptedProvider(),
    )
    return {"text": result.final_output}
