"""The agents of ``make bench-concurrency``: a run that waits on a model, ``calls`` times, with a
durable read after each call (``inputs = {"calls": 5, "reads": 5, "model": ...}``).

``bench-inflight`` is the sync agent; ``bench-inflight-async`` the same run as an ``async def``
(``await ctx.model(...)``, ``await ctx.call(...)``). The async one is registered only if
``@agent`` takes an ``async def`` without refusing it (``ASYNC_REGISTERED``); whether it also
*runs* is for the bench to find out (``harness.bench.concurrency.async_agents_work``). The
model id is any non-scripted id: ``ctx.model`` sends it to ``RUNLEDGER_MODEL_CLIENT``, which the
bench points at its loopback model server (``ANTHROPIC_BASE_URL``).

Registered in the worker processes by ``RUNLEDGER_AGENT_MODULES=...,harness.bench.inflight_agents``.
"""

from __future__ import annotations

from typing import Any

from ledger.agents import agent, tool

SYNC_AGENT = "bench-inflight"
ASYNC_AGENT = "bench-inflight-async"
MODEL = "claude-bench-slow"


@tool(kind="read", name="bench-inflight-read")
def inflight_read(i: int) -> dict[str, int]:
    return {"i": i}


def _plan(inputs: dict[str, Any]) -> tuple[int, int, str]:
    return int(inputs.get("calls", 5)), int(inputs.get("reads", 5)), str(inputs.get("model", MODEL))


@agent(SYNC_AGENT, tools=[inflight_read])
def inflight(ctx: Any, inputs: dict[str, Any]) -> int:
    calls, reads, model = _plan(inputs)
    for i in range(max(calls, reads)):
        if i < calls:
            ctx.model(f"call {i} of a run in flight", model=model, step=f"m{i}")
        if i < reads:
            ctx.call(inflight_read, step=f"r{i}", i=i)
    return calls + reads


async def inflight_async(ctx: Any, inputs: dict[str, Any]) -> int:
    calls, reads, model = _plan(inputs)
    for i in range(max(calls, reads)):
        if i < calls:
            await ctx.model(f"call {i} of a run in flight", model=model, step=f"m{i}")
        if i < reads:
            await ctx.call(inflight_read, step=f"r{i}", i=i)
    return calls + reads


try:
    agent(ASYNC_AGENT, tools=[inflight_read])(inflight_async)
    ASYNC_REGISTERED = True
except Exception:  # an @agent that refuses an async def: the bench skips the async mode
    ASYNC_REGISTERED = False
