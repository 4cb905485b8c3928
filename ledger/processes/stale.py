"""Accept a stale step by run id, for callers that hold no page (the command line, the API):
find the step, dry-replay for today's inputs, then ``transitions.step_accept_stale``.

The dashboard's stale page does the same in two requests (it shows the diff first).
"""

from __future__ import annotations

from ledger.errors import NotAllowed
from ledger.models import Run, RunStatus, Step
from ledger.processes.preview import stale_entry
from ledger.transitions import Actor, step_accept_stale


def accept_stale(
    *,
    run_id: str,
    by: Actor,
    reason: str,
    step_id: str | None = None,
    seen_version: int | None = None,
    resume: bool = True,
) -> Step:
    """Keep the stored result of ``step_id`` (default: the step the run is stopped on) for
    today's inputs, and queue the run for resume when it is stopped on that step.

    ``seen_version``: the step's version the caller saw (a conflict if it moved since); None
    takes the version read here. Refused (``NotAllowed``, nothing written): no such step, the
    run is not stopped on a stale step and none is named, or the step is not stale today.
    """
    run = Run.objects.get(pk=run_id)
    if step_id is None:
        if run.status != RunStatus.NEEDS_ATTENTION or run.reason != "stale":
            raise NotAllowed(
                f"run {run_id} is {run.status}"
                + (f" ({run.reason})" if run.reason else "")
                + ", not stopped on a stale step: name the step (--step)"
            )
        step_id = run.blocked_step_id
    step = Step.objects.filter(run_id=run_id, step_id=step_id).first()
    if step is None:
        raise NotAllowed(f"run {run_id} has no step {step_id!r}")
    today = stale_entry(step)  # the dry replay, outside the transaction
    return step_accept_stale(
        step=step,
        today=today,
        by=by,
        reason=reason,
        seen_version=step.version if seen_version is None else seen_version,
        resume=resume,
    )
