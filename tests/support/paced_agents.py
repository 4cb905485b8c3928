"""Agents with flow control, for the pacing tests: loaded by the test process and by the real
workers (``RUNLEDGER_AGENT_MODULES``). Each run holds its worker a little while (a read that
sleeps), long enough that runs of one key would overlap if nothing held them apart."""

from __future__ import annotations

import os
import time
from datetime import timedelta
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


#: The deadline tests' fake clock: the test reads it, the ``paced_tick`` tool moves it on.
CLOCK: dict[str, Any] = {"now": None}
#: What ``paced_send`` sent, by effect key (the downstream system the lookup asks).
SENT: dict[str, int] = {}


class Crash(BaseException):
    """The worker dies here (a test's stand-in for SIGKILL, in process)."""


@tool(kind="read", name="paced_tick")
def tick(seconds: float) -> dict[str, Any]:
    CLOCK["now"] = CLOCK["now"] + timedelta(seconds=seconds)
    return {"at": CLOCK["now"].isoformat()}


def _sent(idempotency_key: str) -> Any:
    return {"sent": idempotency_key} if idempotency_key in SENT else None


@tool(kind="effect", name="paced_send", reconcile=_sent)
def send(message: str, crash: bool, idempotency_key: str) -> dict[str, Any]:
    SENT[idempotency_key] = SENT.get(idempotency_key, 0) + 1
    if crash:
        CLOCK["now"] = CLOCK["now"] + timedelta(seconds=120)
        raise Crash(idempotency_key)  # sent, never recorded: the step stays started
    return {"sent": idempotency_key}


@agent("paced-steps", tools=[tick, send], deadline=60)
def paced_steps(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
    """A read that lets time pass, an effect, another read: at most a minute in all."""
    ctx.call(tick, step="first", seconds=float(inputs.get("first", 1)))
    ctx.call(send, step="send", message="hello", crash=bool(inputs.get("crash", False)))
    ctx.call(tick, step="last", seconds=1)
    return {"done": True}
