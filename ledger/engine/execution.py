"""A live execution's run context, and the end of its batch (batched durability)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ledger.engine.context import AsyncRunContext, RunContext
from ledger.engine.fence import LeaseFence
from ledger.engine.holds import Holds
from ledger.engine.live import LiveSteps
from ledger.engine.walk import Walk
from ledger.registry import Agent
from ledger.states import StepRow


def live_context(
    *,
    run_id: str,
    token: str,
    fence: LeaseFence,
    agent: Agent,
    inputs: Any,
    ledger: dict[str, StepRow],
    clock: Callable[[], datetime],
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
    holds: Holds | None = None,
) -> RunContext:
    """The context of an execution that holds the run's lease ``token``; ``fence`` says when its
    effects may leave the process, and carries the fencing token its tools receive. ``sleep``
    and ``rand`` serve a retry's back-off (a test passes a fake clock's); ``holds`` the pauses
    it obeys."""
    walk = Walk(run_id=run_id, agent=agent, ledger=ledger)
    steps = LiveSteps(
        walk=walk, token=token, fence=fence, clock=clock, sleep=sleep, rand=rand, holds=holds
    )
    kind = AsyncRunContext if agent.is_async else RunContext
    return kind(walk=walk, steps=steps, inputs=inputs, clock=clock, fencing_token=fence.token)


def flush(ctx: RunContext) -> None:
    """Commit what an execution's batch still holds (batched durability): called by the worker
    inside the transaction that records how the execution ended."""
    steps = ctx._steps
    if isinstance(steps, LiveSteps):
        steps.flush()


def sync_flusher(ctx: RunContext) -> None:
    """Wait until the batches handed to the flusher thread are committed (batched durability),
    before the caller opens the transaction that records the execution's end."""
    steps = ctx._steps
    if isinstance(steps, LiveSteps):
        steps.sync_flusher()


def look_up_started(ctx: RunContext) -> list[str]:
    """Ask the lookup of each started effect before a divergence stops the run (see
    ``LiveSteps.look_up_started``)."""
    steps = ctx._steps
    return steps.look_up_started() if isinstance(steps, LiveSteps) else []


def close(ctx: RunContext) -> None:
    """The execution is over (however it ended): stop its batch's flusher thread, if any."""
    steps = ctx._steps
    if isinstance(steps, LiveSteps):
        steps.close()
