"""The engine: the run context an agent receives and what becomes of each of its calls.

- ``context``: ``RunContext``, the agent author's API; builds each call (validated, hashed
  inputs, a stable step id) and hands it to a ``Steps``;
- ``decide``: what a resume does with a call given its recorded row and the recorded path —
  the one decision the live steps act on and the dry replay (``ledger.preview``) reports;
- ``live``: the live steps: replay, reconcile or execute, fan-out on threads, every write
  through ``ledger.transitions`` fenced by the lease token;
- ``fence``: when an effect may leave the process (the lease's local deadline, the takeover's
  wait, the fencing token);
- ``batch``: batched durability, the finished steps waiting to be committed together;
- ``walk``: where an execution stands on the recorded path (shared by context and steps);
- ``calls``: the ``Call`` record and the text forms the ledger stores.

Never imports ``runs``; writes nothing except through ``ledger.transitions``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ledger.engine.context import RunContext
from ledger.engine.fence import LeaseFence
from ledger.engine.live import LiveSteps
from ledger.engine.walk import Walk
from ledger.registry import Agent
from ledger.selectors.ledger import StepRow


def live_context(
    *,
    run_id: str,
    token: str,
    fence: LeaseFence,
    agent: Agent,
    inputs: Any,
    ledger: dict[str, StepRow],
    clock: Callable[[], datetime],
) -> RunContext:
    """The context of an execution that holds the run's lease ``token``; ``fence`` says when its
    effects may leave the process, and carries the fencing token its tools receive."""
    walk = Walk(run_id=run_id, agent=agent, ledger=ledger)
    steps = LiveSteps(walk=walk, token=token, fence=fence, clock=clock)
    return RunContext(walk=walk, steps=steps, inputs=inputs, clock=clock, fencing_token=fence.token)


def flush(ctx: RunContext) -> None:
    """Commit what an execution's batch still holds (batched durability): called by the worker
    inside the transaction that records how the execution ended."""
    steps = ctx._steps
    if isinstance(steps, LiveSteps):
        steps.flush()


def close(ctx: RunContext) -> None:
    """The execution is over (however it ended): stop its batch's flusher thread, if any."""
    steps = ctx._steps
    if isinstance(steps, LiveSteps):
        steps.close()


__all__ = ["RunContext", "close", "flush", "live_context"]
