"""An example LangGraph graph on the ledger (needs ``runledger[langgraph]``): the refund desk as
LangGraph's docs build an agent — a chat model with tools bound, a ``ToolNode``, ``tools_condition``
and a human review node that calls ``interrupt()`` — on a scripted chat model, so the demo, the
tests and the kill tests run it offline. A real model is one line away
(``ChatAnthropic(model="claude-haiku-4-5")``).

Its turns: 1. fetch both invoices (two parallel calls of an async tool); 2. refund both (two
parallel effects with a lookup), after a person approves them (``interrupt``); 3. tell the team
(an effect without a lookup); 4. a one-line summary.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from ledger import faultpoints
from ledger.adapters.langgraph import effect_key, run_graph
from ledger.agents import AsyncRunContext, agent
from ledger.examples import simulators
from ledger.examples.agents import INVOICES


class ScriptedChatModel(BaseChatModel):
    """A LangChain chat model whose answer depends only on the conversation it is given (a
    stand-in for ``ChatAnthropic``/``ChatOpenAI``); ``bind_tools`` as a real one."""

    model_name: str = "scripted-refund-desk"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=answer(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop)


def _returns(messages: list[BaseMessage], name: str) -> list[Any]:
    """The JSON results of the calls of ``name`` (a declined call's text is left out)."""
    found = []
    for m in messages:
        if isinstance(m, ToolMessage) and m.name == name and str(m.content).startswith("{"):
            found.append(json.loads(str(m.content)))
    return found


def answer(messages: list[BaseMessage]) -> AIMessage:
    """The scripted model: turn n is 1 + the answers so far."""
    turn = 1 + sum(isinstance(m, AIMessage) for m in messages)
    if os.environ.get("RUNLEDGER_EXAMPLE_ASKED"):  # the tests count the real asks, per turn
        with open(os.environ["RUNLEDGER_EXAMPLE_ASKED"], "a") as log:
            log.write(f"{turn}\n")
    faultpoints.point("lg.model")  # inside a model request
    if turn == 1:
        ids = [w.strip(".,") for w in str(messages[-1].content).split() if w.startswith("inv_")]
        calls = [
            {"name": "fetch_invoice", "args": {"invoice_id": i}, "id": f"fetch-{i}"} for i in ids
        ]
        return AIMessage(content="Fetching the invoices.", tool_calls=calls)
    if turn == 2:
        calls = [
            {
                "name": "refund_charge",
                "args": {"customer": inv["customer"], "amount_cents": inv["total_cents"]},
                "id": f"refund-{inv['invoice_id']}",
            }
            for inv in _returns(messages, "fetch_invoice")
        ]
        return AIMessage(content="", tool_calls=calls)
    charges = _returns(messages, "refund_charge")
    if not charges:
        return AIMessage(content="No refund was sent: a person declined.")
    if turn == 3:
        text = "refunded " + ", ".join(c["charge_id"] for c in charges)
        call = {"name": "notify_team", "args": {"channel": "#billing", "text": text}, "id": "note"}
        return AIMessage(content="", tool_calls=[call])
    return AIMessage(content=f"Refunded {len(charges)} invoices and told #billing.")


# --- the graph, as LangGraph's docs write it ------------------------------------------------


@tool
async def fetch_invoice(invoice_id: str) -> dict[str, Any]:
    """Look an invoice up in the billing system."""
    faultpoints.point("fetch_invoice")
    return {"invoice_id": invoice_id, **INVOICES[invoice_id]}


@tool
def refund_charge(customer: str, amount_cents: int) -> dict[str, Any]:
    """Refund a customer through the payment provider."""
    return simulators.provider_charge(
        customer=customer, amount_cents=-amount_cents, idempotency_key=effect_key()
    )


@tool
def notify_team(channel: str, text: str) -> dict[str, Any]:
    """Post to the team's channel (no read path)."""
    return simulators.notifier_send(channel=channel, text=text, idempotency_key=effect_key())


tools = [fetch_invoice, refund_charge, notify_team]
model = ScriptedChatModel().bind_tools(tools)


async def call_model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [await model.ainvoke(state["messages"])]}


def review(state: MessagesState) -> Command[Literal["tools", "agent"]]:
    """A person approves refunds before they are sent."""
    last = state["messages"][-1]
    refunds = [c for c in getattr(last, "tool_calls", []) if c["name"] == "refund_charge"]
    if not refunds:
        return Command(goto="tools")
    decision = interrupt({"question": f"Send {len(refunds)} refunds?", "refunds": refunds})
    if isinstance(decision, dict) and decision.get("approve"):
        return Command(goto="tools")
    denied = [
        ToolMessage("A person declined the refund.", tool_call_id=c["id"], name=c["name"])
        for c in refunds
    ]
    return Command(goto="agent", update={"messages": denied})


def build() -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("review", review)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges(
        "agent", tools_condition, {"tools": "review", "__end__": "__end__"}
    )
    builder.add_edge("tools", "agent")
    return builder.compile()


graph = build()

# --- what makes it durable --------------------------------------------------------------------

EFFECTS = {"refund_charge": simulators.provider_lookup, "notify_team": None}


def _prompt(inputs: dict[str, Any]) -> str:
    return "Please refund invoices " + ", ".join(inputs["invoice_ids"]) + "."


@agent(
    "refund_langgraph",
    plan_version="1",
    divergence="refuse",
    max_resumes=5,
    title="Refund with a LangGraph graph",
)
async def refund_langgraph(ctx: AsyncRunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """The LangGraph refund desk (inputs: invoice_ids); a person approves the refunds."""
    state = await run_graph(ctx, graph, {"messages": [("user", _prompt(inputs))]}, effects=EFFECTS)
    return {"text": state["messages"][-1]["data"]["content"]}
