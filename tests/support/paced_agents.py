"""Agents with flow control, for the pacing tests: loaded by the test process and by the real
workers (``RUNLEDGER_AGENT_MODULES``). Each run holds its worker a little while (a read that
sleeps), long enough that runs of one key would overlap if nothing held them apart."""

from __future__ import annotations

import os
import time
from typing import Any

from ledger.agents import RunContext, agent, tool


@tool(kind="read", name="paced_work")
def work(seconds: float, hold: str = "") -> dict[str, Any]:
    """Sleeps ``seconds``, and while the file ``hold`` exists (at most a minute)."""
    time.sleep(seconds)
    until = time.monotonic() + 60
    while hold and os.path.exists(hold) and time.monotonic() < until:
        time.sleep(0.05)
    return {"pid": os.getpid()}


@agent("paced", tools=[work], concurrency={"key": "inputs.customer", "limit": 1})
def paced(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """One slow read, at most one run per customer at once."""
    return ctx.call(
        work, step="work", seconds=float(inputs.get("seconds", 0.3)), hold=inputs.get("hold", "")
    )


@agent("paced-free", tools=[work])
def paced_free(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """The same read with no declared key (a start may give one)."""
    return ctx.call(work, step="work", seconds=float(inputs.get("seconds", 0.3)))
