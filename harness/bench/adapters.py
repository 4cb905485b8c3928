"""The framework adapters' per-step overhead: the same framework agent run bare (the
framework alone, its tools calling the same functions) and on the ledger through its adapter
(``ledger.adapters``), executed as a worker would. Prints and returns the medians.

PydanticAI: the example refund desk (``ledger.examples.pydantic_agents``: 4 model requests,
5 tool calls, 3 of them effects) on PydanticAI's ``FunctionModel`` — no network, so the figure
is what the ledger adds (a committed row per step, the thread hop), not the model's latency.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger.processes import execute

INVOICES = ["inv_1001", "inv_1003"]


def pydantic_ai(rounds: int) -> dict[str, Any]:
    from pydantic_ai import Agent as PydanticAgent

    from ledger.examples import agents as examples
    from ledger.examples import pydantic_agents

    # PydanticAI runs sync tools on threads of its own: each gives its connection back, as the
    # adapter's tool pool does (a pooled connection kept by a finished thread is never reused).
    def refund_charge(customer: str, amount_cents: int) -> dict[str, Any]:
        try:
            return examples.refund_charge.fn(
                customer=customer, amount_cents=amount_cents, idempotency_key=uuid.uuid4().hex
            )
        finally:
            connection.close()

    def notify_team(channel: str, text: str) -> dict[str, Any]:
        try:
            return examples.notify_team.fn(
                channel=channel, text=text, idempotency_key=uuid.uuid4().hex
            )
        finally:
            connection.close()

    def bare() -> None:
        desk = pydantic_agents.refund_desk()
        agent = PydanticAgent(
            desk.model,
            instructions=pydantic_agents.INSTRUCTIONS["2"],
            tools=[examples.fetch_invoice.fn, refund_charge, notify_team],
        )
        agent.run_sync("Please refund invoices " + ", ".join(INVOICES) + ".")

    def ledger() -> None:
        run = start_unannounced(agent="refund_pydantic_ai", inputs={"invoice_ids": INVOICES})
        out = execute.run_execute(
            run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
        )
        assert out is not None and out.status == "succeeded", out

    steps = 9  # 4 model steps, 5 tool steps
    return _compare("pydantic_ai", bare, ledger, steps=steps, rounds=rounds)


#: Model calls in the LangGraph bench's loop (each a model step on the ledger).
LANGGRAPH_STEPS = 20


def _langgraph_loop() -> Any:
    """A LangGraph graph that loops ``LANGGRAPH_STEPS`` times through one node calling a fake
    chat model (no network): the bench's graph, bare and on the ledger."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.graph import END, START, MessagesState, StateGraph

    class Counting(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "counting"

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            message = AIMessage(content=f"step {len(messages)}")
            return ChatResult(generations=[ChatGeneration(message=message)])

    model = Counting()

    async def think(state: Any) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def more(state: Any) -> str:
        return END if len(state["messages"]) > LANGGRAPH_STEPS else "think"

    builder = StateGraph(MessagesState)
    builder.add_node("think", think)
    builder.add_edge(START, "think")
    builder.add_conditional_edges("think", more)
    return builder.compile()


def langgraph(rounds: int) -> dict[str, Any]:
    """LangGraph: a loop of ``LANGGRAPH_STEPS`` model calls, the plain ``graph.ainvoke`` (no
    checkpointer) against ``run_graph`` in an async ledger agent (a model step per call, the
    graph's checkpoints in the ledger's database)."""
    import asyncio

    from ledger import registry
    from ledger.adapters.langgraph import run_graph
    from ledger.agents import agent

    graph = _langgraph_loop()
    inputs = {"messages": [("user", "count")]}
    config = {"recursion_limit": LANGGRAPH_STEPS * 2 + 10}
    if "bench_langgraph" not in registry.agents():

        @agent("bench_langgraph")
        async def bench_langgraph(ctx: Any, _inputs: Any) -> Any:
            state = await run_graph(ctx, graph, inputs, config=config)
            return len(state["messages"])

    def bare() -> None:
        asyncio.run(graph.ainvoke(inputs, config))

    def ledger() -> None:
        run = start_unannounced(agent="bench_langgraph", inputs={})
        out = execute.run_execute(
            run_id=run.run_id, worker="bench", clock=timezone.now, heartbeat=False
        )
        assert out is not None and out.status == "succeeded", out

    return _compare("langgraph", bare, ledger, steps=LANGGRAPH_STEPS, rounds=rounds)


def _compare(
    name: str, bare: Callable[[], None], ledger: Callable[[], None], *, steps: int, rounds: int
) -> dict[str, Any]:
    bare()
    ledger()  # warm both (imports, connections)
    bare_s = statistics.median(_time(bare) for _ in range(rounds))
    ledger_s = statistics.median(_time(ledger) for _ in range(rounds))
    per_step_ms = (ledger_s - bare_s) / steps * 1000
    print(
        f"{name}: {steps} steps; bare framework run {bare_s * 1000:.1f} ms, on the ledger "
        f"{ledger_s * 1000:.1f} ms (medians of {rounds}); the adapter adds "
        f"{per_step_ms:.2f} ms per step; ratio {ledger_s / bare_s:.1f}x"
    )
    return {
        f"{name}_bare_run_ms": round(bare_s * 1000, 2),
        f"{name}_ledger_run_ms": round(ledger_s * 1000, 2),
        f"{name}_overhead_per_step_ms": round(per_step_ms, 3),
    }


def _time(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


#: Each adapter's bench: rounds -> figures (the other adapters add theirs here).
BENCHES: dict[str, Callable[[int], dict[str, Any]]] = {
    "pydantic_ai": pydantic_ai,
    "langgraph": langgraph,
}
