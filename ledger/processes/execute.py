"""What a worker does with a run: claim it, execute (or resume) its agent from the top under a
heartbeat, and record how the execution ended (the sweep that recovers dead workers' runs is
``ledger.processes.sweep``).

Every write goes through ``ledger.transitions``; the Celery tasks in ``runs.operations.tasks`` and
the
commands call these functions with run ids.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from ledger import canonical, logcontext, observe, registry, selectors, transitions
from ledger.conf import conf
from ledger.engine import RunContext
from ledger.engine.execution import close, flush, live_context
from ledger.engine.fence import LeaseFence
from ledger.errors import (
    AgentMissing,
    BudgetExhausted,
    ContinueAsNew,
    Divergence,
    DuplicateStepId,
    LeaseLost,
    LedgerUnavailable,
    NotJSON,
    RunBlocked,
    StepFailed,
)
from ledger.models import Run, RunStatus

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Outcome:
    """How one execution of a run ended."""

    run_id: str
    status: str
    reason: str = ""
    step_id: str = ""
    detail: str = ""
    result: Any = None
    replayed: int = 0
    executed: int = 0
    continued_as: str = ""  # the new run's id when the agent called ctx.continue_as_new


class Heartbeat:
    """Renews a lease from a background thread while the agent executes; each confirmed
    renewal moves the execution's effect deadline (``fence``), a refused one ends it."""

    def __init__(self, *, run_id: str, token: str, seconds: float, fence: LeaseFence) -> None:
        self.run_id, self.token, self.seconds, self.fence = run_id, token, seconds, fence
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{run_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.seconds)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.seconds / 3):
                sent_at = time.monotonic()  # before the statement: the deadline errs early
                renewed = self._renew()
                if renewed is False:
                    self.fence.revoked()
                    self.lost.set()
                    return
                if renewed:
                    self.fence.confirmed(sent_at=sent_at)
        except Exception:
            log.exception("heartbeat for run %s failed", self.run_id)
        finally:
            connection.close()

    def _renew(self) -> bool | None:
        """One renewal: True when confirmed, False when the lease is no longer ours, None when
        the database failed (the server restarting, a cut connection). That is not a lost
        lease, but not a confirmation either: the effect deadline does not move; the next beat
        tries again on a new connection, and if none succeeds in time the lease expires (the
        fence stops effects first) and the sweep recovers."""
        try:
            return transitions.lease_renew(
                run_id=self.run_id, token=self.token, seconds=self.seconds
            )
        except DatabaseError as exc:
            log.warning(
                "heartbeat for run %s: the database failed (%s); retrying", self.run_id, exc
            )
            connection.close()
            return None


def run_execute(
    *,
    run_id: str,
    worker: str,
    clock: Clock = timezone.now,
    lease_seconds: float | None = None,
    heartbeat: bool = True,
) -> Outcome | None:
    """Claim the run, execute (or resume) its agent from the top, record the outcome.

    Returns None when the run is not claimable (missing, finished, or leased by another live
    worker): a second delivery of the same task does nothing.
    """
    seconds = lease_seconds or conf.RUNLEDGER_LEASE_SECONDS
    sent_at = time.monotonic()  # before the claim is sent: the effect deadline errs early
    token = transitions.lease_claim(run_id=run_id, owner=worker, seconds=seconds, clock=clock)
    if token is None:
        log.info("run %s: not claimable by %s (missing, finished or leased)", run_id, worker)
        return None
    with logcontext.bound(run_id=run_id, worker=worker, lease=logcontext.lease_prefix(token)):
        return _execute_leased(run_id, worker, token, seconds, clock, heartbeat, sent_at)


def _execute_leased(
    run_id: str,
    worker: str,
    token: str,
    seconds: float,
    clock: Clock,
    heartbeat: bool,
    sent_at: float,
) -> Outcome | None:
    run = Run.objects.get(pk=run_id)
    fence = _fence(run, seconds=seconds, sent_at=sent_at, clock=clock)
    try:
        if heartbeat:
            with Heartbeat(run_id=run_id, token=token, seconds=seconds, fence=fence):
                return _execute_claimed(run, token, clock, fence)
        return _execute_claimed(run, token, clock, fence)
    except LeaseLost as exc:
        log.warning(
            "run %s: %s lost its lease; it wrote nothing more and stops (%s)", run_id, worker, exc
        )
        return None
    except LedgerUnavailable as exc:
        return _ledger_unavailable(run_id, token, exc, clock)
    except DatabaseError as exc:
        _left_for_the_sweep(run_id, f"the database failed ({exc})")
        return None
    finally:
        close_old_connections()


def _ledger_unavailable(
    run_id: str, token: str, exc: LedgerUnavailable, clock: Clock
) -> Outcome | None:
    """A step's ledger write failed. Lost database (cut, restart): leave the run to the sweep,
    which re-queues it once the lease expires; the resume replays the ledger and reconciles
    the effect whose write is in doubt. Refused statement (a timeout, a full disk): the run
    fails and says why — a loop of resumes would hit the same wall."""
    connection.close()  # broken, or in an unknown state: the next query opens a new one
    if exc.transient:
        _left_for_the_sweep(run_id, str(exc))
        return None
    log.error("run %s: %s", run_id, exc)
    error = exc.explain()
    try:
        transitions.run_finish(
            run_id=run_id, token=token, status=RunStatus.FAILED, error=error, clock=clock
        )
    except (DatabaseError, LeaseLost) as again:
        _left_for_the_sweep(run_id, f"{exc}; recording the failure failed too ({again})")
        return None
    return Outcome(run_id=run_id, status=RunStatus.FAILED, step_id=exc.step_id, detail=error)


def _left_for_the_sweep(run_id: str, why: str) -> None:
    connection.close()
    log.error(
        "run %s: %s; this worker stops without recording an outcome, the lease expires and "
        "the sweep re-queues the run for a resume",
        run_id,
        why,
    )


def _fence(run: Run, *, seconds: float, sent_at: float, clock: Clock) -> LeaseFence:
    """The claimed execution's effect fence: its deadline, its fencing token (the claim counter)
    and when the previous holder's window ends (see ``ledger.engine.fence``)."""
    # A lease shorter than the settings assume (a test's) keeps two thirds of itself.
    margin = min(conf.RUNLEDGER_EFFECT_MARGIN_SECONDS, seconds / 3)
    fence = LeaseFence(
        run_id=run.run_id,
        token=run.executions,
        lease_seconds=seconds,
        margin=margin,
        sent_at=sent_at,
    )
    at, now = time.monotonic(), clock()
    fence.after_previous_holder(prior_expiry=run.prior_lease_expires_at, now=now, at=at)
    return fence


def _execute_claimed(run: Run, token: str, clock: Clock, fence: LeaseFence) -> Outcome:
    try:
        if run.executions > 1:
            _count_resume(run, token, clock)
            observe.emit("run_resumed", run_id=run.run_id)
        definition = registry.get_agent(run.agent)
        if definition is None:
            raise AgentMissing("", registry.missing_agent_message(run.agent))
        _check_plan(run, definition, token, clock)
        inputs = canonical.ordered(run.inputs)  # jsonb's key order is not the first one
        ctx = live_context(
            run_id=run.run_id,
            token=token,
            fence=fence,
            agent=definition,
            inputs=inputs,
            ledger=selectors.load_steps(run.run_id),
            clock=clock,
        )
        try:
            return _execute_agent(run, token, clock, definition, ctx, inputs)
        finally:
            close(ctx)  # batched durability: its flusher thread ends with the execution
    except RunBlocked as exc:
        return _block(run, token, clock, exc, None)


def _execute_agent(
    run: Run, token: str, clock: Clock, definition: registry.Agent, ctx: RunContext, inputs: Any
) -> Outcome:
    """Call the agent with its context; record how the call ended."""
    try:
        result = definition.fn(ctx, inputs)
        data = canonical.normalize(result, step_id="<run result>")
    except ContinueAsNew as signal:
        return _continue(run, token, clock, signal, ctx)
    except RunBlocked as exc:
        return _block(run, token, clock, exc, ctx)
    except (StepFailed, NotJSON, DuplicateStepId) as exc:
        return _finish(run, token, clock, RunStatus.FAILED, error=str(exc), ctx=ctx)
    except LeaseLost:
        raise
    except Exception as exc:
        tb = traceback.format_exc(limit=8)
        log.exception("run %s: agent raised", run.run_id)
        return _finish(run, token, clock, RunStatus.FAILED, error=f"{exc!r}\n{tb}", ctx=ctx)
    return _finish(run, token, clock, RunStatus.SUCCEEDED, result=data, ctx=ctx)


def _count_resume(run: Run, token: str, clock: Clock) -> None:
    """Every execution after the first is a resume; at the budget the run stops loudly."""
    if run.resume_count >= run.max_resumes:
        log.error(
            "run %s: resume budget of %d used up; it waits for a person",
            run.run_id,
            run.max_resumes,
        )
        raise BudgetExhausted(
            run.blocked_step_id,
            f"resume budget used up ({run.resume_count} of {run.max_resumes}); raise it to go on",
        )
    transitions.run_count_resume(run_id=run.run_id, token=token, clock=clock)
    run.resume_count += 1


def _check_plan(run: Run, definition: registry.Agent, token: str, clock: Clock) -> None:
    if not run.tool_schema_hash:
        # No worker executed this run yet: the plan it is held to is this worker's code, not
        # the code of the process that started it (which may be older or newer).
        transitions.run_stamp_plan(run_id=run.run_id, token=token, clock=clock)
        return
    changes = []
    if run.plan_version != definition.plan_version:
        changes.append(f"plan version {run.plan_version!r} → {definition.plan_version!r}")
    if run.tool_schema_hash != definition.tool_schema_hash:
        changes.append(
            f"tool schema {run.tool_schema_hash[:12]}… → {definition.tool_schema_hash[:12]}…"
        )
    if not changes:
        return
    detail = "the code changed since this run was recorded: " + ", ".join(changes)
    if definition.divergence == "refuse":
        raise Divergence("", detail + "; the agent's policy refuses to resume (start a clean run)")
    log.warning("run %s: %s; replanning under the agent's policy", run.run_id, detail)
    transitions.run_replan(run_id=run.run_id, token=token, clock=clock)


@contextlib.contextmanager
def _recording_outcome(ctx: RunContext | None) -> Iterator[None]:
    """The transaction that records how an execution ended. Under batched durability the steps
    still waiting commit first, in it: a run never ends with executed steps left unrecorded."""
    with transaction.atomic():
        if ctx is not None:
            flush(ctx)
        yield


def _block(run: Run, token: str, clock: Clock, exc: RunBlocked, ctx: RunContext | None) -> Outcome:
    with _recording_outcome(ctx):
        transitions.run_block(run_id=run.run_id, token=token, why=exc, clock=clock)
    log.warning("run %s needs attention: %s", run.run_id, exc)
    return Outcome(
        run_id=run.run_id,
        status=RunStatus.NEEDS_ATTENTION,
        reason=exc.reason,
        step_id=exc.step_id,
        detail=exc.detail,
        replayed=ctx.replayed if ctx else 0,
        executed=ctx.executed if ctx else 0,
    )


def _finish(
    run: Run,
    token: str,
    clock: Clock,
    status: RunStatus,
    *,
    result: Any = None,
    error: str = "",
    ctx: RunContext,
) -> Outcome:
    with _recording_outcome(ctx):
        transitions.run_finish(
            run_id=run.run_id, token=token, status=status, result=result, error=error, clock=clock
        )
    return Outcome(
        run_id=run.run_id,
        status=status,
        result=result,
        detail=error,
        replayed=ctx.replayed,
        executed=ctx.executed,
    )


def _continue(
    run: Run, token: str, clock: Clock, signal: ContinueAsNew, ctx: RunContext
) -> Outcome:
    with _recording_outcome(ctx):
        child = transitions.run_continue_as_new(
            run=run, token=token, inputs=signal.inputs, clock=clock
        )
    log.info("run %s continued as %s", run.run_id, child.run_id)
    return Outcome(
        run_id=run.run_id,
        status=RunStatus.SUCCEEDED,
        result={"continued_as": child.run_id},
        replayed=ctx.replayed,
        executed=ctx.executed,
        continued_as=child.run_id,
    )
