"""An agent module that fails to import where ``RUNLEDGER_TEST_BREAK_AGENTS=1`` (a worker of a
broken deploy); elsewhere it registers the ``breakable`` agent."""

from __future__ import annotations

import os
from typing import Any

from ledger.agents import RunContext, agent, tool

if os.environ.get("RUNLEDGER_TEST_BREAK_AGENTS") == "1":
    raise ImportError("breakable_agents: a dependency of this deploy is missing")


@tool(kind="read", name="breakable_read")
def breakable_read(n: int) -> dict[str, Any]:
    """Return what it was given."""
    return {"n": n}


@agent("breakable", plan_version="1", tools=[breakable_read])
def breakable(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """One read."""
    return ctx.call(breakable_read, step="read", n=int(inputs.get("n", 1)))
