"""An example PydanticAI agent on the ledger (needs ``runledger[pydantic-ai]``): the refund desk
as a PydanticAI ``Agent`` whose model is scripted offline (PydanticAI's ``FunctionModel``), so
the demo, the tests and the kill tests run it without a key. A real model is one argument away:
``PydanticAgent("anthropic:claude-haiku-4-5", ...)``.

Its turns: 1. fetch both invoices (two parallel reads); 2. refund both (two parallel effects
with a lookup); 3. tell the team (an effect without one); 4. a one-line summary.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import RunContext as PaiRunContext
from pydantic_ai import Tool as PaiTool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from ledger import faultpoints
from ledger.adapters.pydantic_ai import effect_key, run_agent
from ledger.agents import AsyncRunContext, RunContext, agent
from ledger.examples import simulators
from ledger.examples.agents import INVOICES as INVOICES_BY_ID
from ledger.examples.agents import fetch_invoice, notify_team, refund_charge

#: The instructions are code: changing them between a crash and a resume makes the next model
#: step stale (the demo and the tests switch them with RUNLEDGER_EXAMPLE_PROMPT).
INSTRUCTIONS = {
    "1": "You settle refund requests. Fetch each invoice, refund it, tell the team, summarise.",
    "2": (
        "You settle refund requests for the billing team. Fetch every invoice named, refund "
        "each with refund_charge, tell #billing once with notify_team, then summarise."
    ),
}

TOOLS = [fetch_invoice, refund_charge, notify_team]


def _returns(messages: list[ModelMessage], tool: str) -> list[Any]:
    found = []
    for message in messages:
        for part in getattr(message, "parts", []):
            if getattr(part, "part_kind", "") == "tool-return" and part.tool_name == tool:
                content = part.content
                found.append(json.loads(content) if isinstance(content, str) else content)
    return found


def refund_desk_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: what it answers depends only on the conversation it is given."""
    turn = 1 + sum(isinstance(m, ModelResponse) for m in messages)
    if os.environ.get("RUNLEDGER_EXAMPLE_ASKED"):  # the tests count the real asks, per turn
        with open(os.environ["RUNLEDGER_EXAMPLE_ASKED"], "a") as log:
            log.write(f"{turn}\n")
    faultpoints.point("pai.model")  # inside a model request
    if turn == 1:
        prompt = getattr(messages[0].parts[-1], "content", "")  # "Please refund invoices …"
        ids = [w.strip(".,") for w in str(prompt).split() if w.startswith("inv_")]
        calls = [ToolCallPart("fetch_invoice", {"invoice_id": i}, f"fetch-{i}") for i in ids]
        return ModelResponse(parts=[TextPart("Fetching the invoices."), *calls])
    if turn == 2:
        invoices = _returns(messages, "fetch_invoice")
        return ModelResponse(
            parts=[
                ToolCallPart(
                    "refund_charge",
                    {"customer": inv["customer"], "amount_cents": inv["total_cents"]},
                    f"refund-{inv['invoice_id']}",
                )
                for inv in invoices
            ]
        )
    if turn == 3:
        charges = _returns(messages, "refund_charge")
        text = "refunded " + ", ".join(c["charge_id"] for c in charges)
        return ModelResponse(
            parts=[ToolCallPart("notify_team", {"channel": "#billing", "text": text}, "notify")]
        )
    charges = _returns(messages, "refund_charge")
    return ModelResponse(parts=[TextPart(f"Refunded {len(charges)} invoices and told #billing.")])


def refund_desk() -> PydanticAgent[None, str]:
    """The PydanticAI agent (built per run, so a deploy's new instructions take effect)."""
    return PydanticAgent(
        FunctionModel(refund_desk_model),
        instructions=INSTRUCTIONS[os.environ.get("RUNLEDGER_EXAMPLE_PROMPT", "2")],
        name="refund_desk",
    )


@agent(
    "refund_pydantic_ai",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    tools=TOOLS,
    title="Refund with a PydanticAI agent",
)
def refund_pydantic_ai(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """Refund invoices with a PydanticAI agent (inputs: invoice_ids)."""
    text = run_agent(
        ctx,
        refund_desk(),
        "Please refund invoices " + ", ".join(inputs["invoice_ids"]) + ".",
        tools=TOOLS,
    )
    return {"text": text}


# --- the same desk written as PydanticAI's docs write it ----------------------------------------
#
# Its tools are PydanticAI's own: ``@agent.tool`` taking ``RunContext[Billing]`` (the deps: the
# author's clients, built per execution), an ``async def`` tool, and a ``FunctionToolset``. Only
# ``run_agent(effects=...)`` says which are effects; each reads its key with ``effect_key()``.


@dataclass
class Billing:
    """The deps: the billing system's clients (here the offline simulators)."""

    invoices: dict[str, dict[str, Any]]

    def refund(self, customer: str, amount_cents: int, key: str) -> dict[str, Any]:
        return simulators.provider_charge(
            customer=customer, amount_cents=-amount_cents, idempotency_key=key
        )


native_desk = PydanticAgent(
    FunctionModel(refund_desk_model),
    deps_type=Billing,
    instructions=INSTRUCTIONS["2"],
    name="refund_desk_native",
)


@native_desk.tool(name="fetch_invoice")
async def fetch_invoice_native(ctx: PaiRunContext[Billing], invoice_id: str) -> dict[str, Any]:
    """Look an invoice up in the billing system."""
    faultpoints.point("fetch_invoice")
    return {"invoice_id": invoice_id, **ctx.deps.invoices[invoice_id]}


@native_desk.tool(name="refund_charge")
def refund_charge_native(
    ctx: PaiRunContext[Billing], customer: str, amount_cents: int
) -> dict[str, Any]:
    """Refund a customer through the payment provider."""
    return ctx.deps.refund(customer, amount_cents, effect_key())


def notify_team_native(channel: str, text: str) -> dict[str, Any]:
    """Post to the team's channel (no read path)."""
    return simulators.notifier_send(channel=channel, text=text, idempotency_key=effect_key())


team = FunctionToolset([PaiTool(notify_team_native, name="notify_team")])

NATIVE_EFFECTS = {"refund_charge": simulators.provider_lookup, "notify_team": None}


def _prompt(inputs: dict[str, Any]) -> str:
    return "Please refund invoices " + ", ".join(inputs["invoice_ids"]) + "."


@agent(
    "refund_pydantic_ai_native",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    title="Refund with a PydanticAI agent as written",
)
def refund_pydantic_ai_native(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """The PydanticAI desk with its own tools and deps (inputs: invoice_ids)."""
    billing = Billing(invoices=INVOICES_BY_ID)  # the deps: rebuilt on every execution
    text = run_agent(
        ctx, native_desk, _prompt(inputs), deps=billing, toolsets=[team], effects=NATIVE_EFFECTS
    )
    return {"text": text}


@agent(
    "refund_pydantic_ai_native_async",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    title="Refund with a PydanticAI agent as written (async)",
)
async def refund_pydantic_ai_native_async(
    ctx: AsyncRunContext, inputs: dict[str, Any]
) -> dict[str, Any]:
    """``refund_pydantic_ai_native`` as an async agent: the PydanticAI run is a coroutine on
    the worker's event loop."""
    billing = Billing(invoices=INVOICES_BY_ID)
    text = await run_agent(
        ctx, native_desk, _prompt(inputs), deps=billing, toolsets=[team], effects=NATIVE_EFFECTS
    )
    return {"text": text}
