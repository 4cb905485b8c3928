"""What a worker does with a run: claim it, execute (or resume) its agent from the top while the
process's lease renewer (``ledger.processes.leases``) keeps its lease, and record how the
execution ended (the sweep that recovers dead workers' runs is ``ledger.processes.sweep``).

Every write goes through ``ledger.transitions``; the Celery tasks in ``runs.operations.tasks`` and
the commands call these functions with run ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import traceback
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections, connection, connections, transaction
from django.utils import timezone

from ledger import canonical, logcontext, observe, registry, selectors, transitions
from ledger.conf import conf
from ledger.engine import AsyncRunContext, RunContext, aio, pooling
from ledger.engine.execution import close, flush, live_context, look_up_started, sync_flusher
from ledger.engine.fence import LeaseFence
from ledger.engine.holds import Holds
from ledger.errors import (
    AgentDefinitionError,
    AgentMissing,
    ApprovalRejected,
    BudgetExhausted,
    ContinueAsNew,
    DeadlineReached,
    Divergence,
    DuplicateStepId,
    HandedBack,
    LeaseLost,
    LedgerUnavailable,
    NotAwaited,
    NotJSON,
    RateLimited,
    RetryLater,
    RunBlocked,
    RunCancelled,
    RunPaused,
    StepFailed,
    Waiting,
)
from ledger.models import FINAL_STATUSES, ExecutionEnding, Reason, Run, RunStatus
from ledger.processes import leases

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


def run_execute(
    *,
    run_id: str,
    worker: str,
    clock: Clock = timezone.now,
    lease_seconds: float | None = None,
    heartbeat: bool = True,
    task_id: str = "",
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
    runner: Runner | None = None,
) -> Outcome | None:
    """Claim the run, execute (or resume) its agent from the top, record the outcome and the
    execution (``ledger.models.Execution``: one insert at the claim, one update at the end).

    An ``async def`` agent's coroutine runs on ``runner`` (default ``ledger.engine.aio.run``:
    this process's shared event loop, the calling thread waiting for it, holding no database
    connection); the claim, the heartbeat and the outcome are the same as a sync agent's.

    Returns None when the run is not claimable (missing, finished, leased by another live
    worker, waiting out a retry's back-off, or held by its concurrency key): a second delivery
    of the same task does nothing. A queued run that a queued run of higher priority outranks
    is not executed: that one is, and ``run_id`` is announced again (``priority_swap``).
    ``sleep`` and ``rand`` serve the retries' back-off (a test passes a fake clock's). A run of
    an agent this process lacks because an agent module failed to import is not claimed
    either: it stays queued for a worker that has it (the sweep sends it again), and is never
    failed for this process's broken deploy.
    """
    if _agent_lost_to_an_import_error(run_id):
        return None
    seconds = lease_seconds or conf.RUNLEDGER_LEASE_SECONDS
    sent_at = time.monotonic()  # before the claim is sent: the effect deadline errs early
    token = transitions.lease_claim(run_id=run_id, owner=worker, seconds=seconds, clock=clock)
    if token is None:
        # Outranked by a queued run of higher priority? That one is claimed instead.
        swapped = transitions.priority_swap(
            run_id=run_id, owner=worker, seconds=seconds, clock=clock
        )
        if swapped is None:
            log.info("run %s: not claimable by %s (missing, finished or leased)", run_id, worker)
            return None
        if swapped[0] != run_id:
            log.info(
                "run %s: outranked by run %s, which %s takes first", run_id, *swapped[:1], worker
            )
        run_id, token = swapped
    with logcontext.bound(run_id=run_id, worker=worker, lease=logcontext.lease_prefix(token)):
        waits = _Waits(sleep, rand, runner or aio.run)
        ex_key = _Key()
        try:
            return _execute_leased(
                run_id, worker, token, seconds, clock, heartbeat, sent_at, task_id, waits, ex_key
            )
        finally:
            _offer_slot(run_id, ex_key, clock)


@dataclass
class _Key:
    """The claimed run's concurrency key and limit ("" and 0: none), read with the claim."""

    key: str = ""
    limit: int = 0


def _offer_slot(run_id: str, key: _Key, clock: Clock) -> None:
    """The execution of a keyed run ended (finished, blocked, released, handed back, lost):
    the slot it held is offered to the key's queued runs. Lost (a database error), the sweep
    re-sends runs untouched in the queue."""
    if not key.key:
        return
    try:
        offered = transitions.slots_offer(key=key.key, limit=key.limit, clock=clock)
    except DatabaseError as exc:
        log.warning("run %s: could not offer its concurrency slot (%s)", run_id, exc)
        return
    if offered:
        log.info("run %s: its slot of %s offered to %s", run_id, key.key, ", ".join(offered))


async def arun_execute(*, run_id: str, worker: str, **options: Any) -> Outcome | None:
    """``run_execute`` for code that is on an event loop: the claim, the heartbeat and the
    outcome (sync, Django ORM) on a thread of the loop's default executor, an async agent's
    coroutine on *this* loop. Takes ``run_execute``'s options but ``runner``."""
    loop = asyncio.get_running_loop()

    def on_this_loop(coro: Coroutine[Any, Any, Any]) -> Any:
        return aio.run(coro, loop=loop)

    def execute() -> Outcome | None:
        try:
            return run_execute(run_id=run_id, worker=worker, runner=on_this_loop, **options)
        finally:
            connections.close_all()  # the executor's thread keeps none

    return await asyncio.to_thread(execute)


#: Runs an async agent's coroutine to its end from the worker's thread (``aio.run``).
Runner = Callable[[Coroutine[Any, Any, Any]], Any]


@dataclass(frozen=True)
class _Waits:
    """How a retry's back-off waits (``time.sleep``) and draws its jitter (``random.random``),
    and where an async agent runs (``runner``)."""

    sleep: Callable[[float], None]
    rand: Callable[[], float]
    runner: Runner = aio.run


def _agent_lost_to_an_import_error(run_id: str) -> bool:
    """True when the run's agent is missing here and an agent module failed to import (one
    query, only in a process with a broken module)."""
    errors = registry.import_errors()
    if not errors:
        return False
    agent = Run.objects.filter(pk=run_id).values_list("agent", flat=True).first()
    if agent is None or registry.get_agent(agent) is not None:
        return False
    log.error(
        "run %s: not taken: its agent %r is missing here because agent modules failed to "
        "import (%s); it stays queued for a worker that has it",
        run_id,
        agent,
        "; ".join(f"{m}: {e}" for m, e in errors.items()),
    )
    return True


@dataclass
class _Execution:
    """The claimed execution: its run row (as of the claim), token and number, its context
    once built (for the counts its end records)."""

    run: Run
    token: str
    ctx: RunContext | None = None

    @property
    def number(self) -> int:
        return self.run.executions

    def counts(self) -> tuple[int, int]:
        return (self.ctx.replayed, self.ctx.executed) if self.ctx is not None else (0, 0)


def _execute_leased(
    run_id: str,
    worker: str,
    token: str,
    seconds: float,
    clock: Clock,
    heartbeat: bool,
    sent_at: float,
    task_id: str,
    waits: _Waits,
    key: _Key,
) -> Outcome | None:
    run = Run.objects.get(pk=run_id)
    key.key, key.limit = run.concurrency_key, run.concurrency_limit
    transitions.execution_begin(
        run_id=run_id,
        number=run.executions,
        worker=worker,
        host=socket.gethostname(),
        pid=os.getpid(),
        task_id=task_id,
        clock=clock,
    )
    fence = _fence(run, seconds=seconds, sent_at=sent_at, clock=clock)
    holds = Holds(
        lambda: selectors.active_pauses(run_id=run_id, agent=run.agent),
        deadline=run.deadline_at,
        clock=clock,
    )
    ex = _Execution(run=run, token=token)
    _report_begun(ex, worker, clock)
    outcome: Outcome | None = None
    try:
        outcome = _execute_fenced(ex, worker, clock, heartbeat, seconds, fence, holds, waits)
        return outcome
    finally:
        _report_ended(ex, outcome, clock)


def _report_begun(ex: _Execution, worker: str, clock: Clock) -> None:
    """``execution_begun`` (ledger.observe): a trace opens the execution's span."""
    if observe.watched():
        run = ex.run
        observe.emit(
            "execution_begun",
            run_id=run.run_id,
            number=ex.number,
            agent=run.agent,
            worker=worker,
            created_at=run.created_at,
            at=clock(),
        )


def _report_ended(ex: _Execution, outcome: Outcome | None, clock: Clock) -> None:
    """``execution_ended``: how it ended (``lost`` when it gave the run up unrecorded, or died
    in this process), and the run's times when the run itself is over."""
    if not observe.watched():
        return
    status = outcome.status if outcome is not None else "lost"
    replayed, executed = ex.counts()
    observe.emit(
        "execution_ended",
        run_id=ex.run.run_id,
        number=ex.number,
        agent=ex.run.agent,
        status=status,
        reason=outcome.reason if outcome is not None else "",
        final=status in FINAL_STATUSES,
        created_at=ex.run.created_at,
        at=clock(),
        replayed=replayed,
        executed=executed,
    )


def _execute_fenced(
    ex: _Execution,
    worker: str,
    clock: Clock,
    heartbeat: bool,
    seconds: float,
    fence: LeaseFence,
    holds: Holds,
    waits: _Waits,
) -> Outcome | None:
    run, run_id, token = ex.run, ex.run.run_id, ex.token
    try:
        holds.refresh()  # one query at the claim; the process's lease renewer reads them again
        if heartbeat:
            with _renewed(run, token, seconds, fence, holds):
                return _execute_claimed(ex, clock, fence, holds, waits)
        return _execute_claimed(ex, clock, fence, holds, waits)
    except LeaseLost as exc:
        if fence.cancelled:  # a cancel took the lease while a tool ran: its result unrecorded
            return _end_cancelled(ex, clock)
        why = _lost_why(run_id, exc)
        log.warning(
            "run %s: %s lost its lease; it wrote nothing more and stops: %s", run_id, worker, why
        )
        _end_lease_lost(ex, why, clock)
        return None
    except LedgerUnavailable as exc:
        return _ledger_unavailable(ex, exc, clock)
    except DatabaseError as exc:
        _left_for_the_sweep(run_id, f"the database failed ({exc})")
        return None
    finally:
        close_old_connections()


@contextlib.contextmanager
def _renewed(
    run: Run, token: str, seconds: float, fence: LeaseFence, holds: Holds
) -> Iterator[None]:
    """The execution's lease is renewed by the process's one renewer (``ledger.processes.leases``:
    one statement for all its runs) while the block runs."""
    renewer = leases.renewer()
    held = renewer.hold(
        run_id=run.run_id, token=token, seconds=seconds, fence=fence, agent=run.agent, holds=holds
    )
    try:
        yield
    finally:
        renewer.let_go(held)


def _ledger_unavailable(ex: _Execution, exc: LedgerUnavailable, clock: Clock) -> Outcome | None:
    """A step's ledger write failed. Lost database (cut, restart): leave the run to the sweep,
    which re-queues it once the lease expires; the resume replays the ledger and reconciles
    the effect whose write is in doubt. Refused statement (a timeout, a full disk): the run
    fails and says why — a loop of resumes would hit the same wall."""
    connection.close()  # broken, or in an unknown state: the next query opens a new one
    run_id, token = ex.run.run_id, ex.token
    if exc.transient:
        _left_for_the_sweep(run_id, str(exc))
        return None
    log.error("run %s: %s", run_id, exc)
    error = exc.explain()
    try:
        with transaction.atomic():
            transitions.run_finish(
                run_id=run_id,
                token=token,
                status=RunStatus.FAILED,
                error=error,
                step_id=exc.step_id or "",
                clock=clock,
            )
            _record_end(ex, ExecutionEnding.FAILED, clock, step_id=exc.step_id, error=error)
    except (DatabaseError, LeaseLost) as again:
        _left_for_the_sweep(run_id, f"{exc}; recording the failure failed too ({again})")
        return None
    return Outcome(run_id=run_id, status=RunStatus.FAILED, step_id=exc.step_id, detail=error)


def _lost_why(run_id: str, exc: LeaseLost) -> str:
    """Why the lease is gone, in words: what the run is now and who holds it (a cancel's own
    words are recorded by the cancel)."""
    said = "" if str(exc) in ("", run_id) else f" ({exc})"
    try:
        now = Run.objects.filter(pk=run_id).values("status", "lease_owner", "detail").first()
    except DatabaseError:
        now = None
    if now is None:
        return f"this worker's lease on the run was taken{said}"
    held = f", held by {now['lease_owner']}" if now["lease_owner"] else ""
    detail = f": {now['detail']}" if now["detail"] and now["status"] != RunStatus.RUNNING else ""
    return f"this worker's lease was taken: the run is {now['status']}{held}{detail}{said}"


def _end_lease_lost(ex: _Execution, why: str, clock: Clock) -> None:
    replayed, executed = ex.counts()
    try:
        transitions.execution_end(
            run_id=ex.run.run_id,
            number=ex.number,
            ending=ExecutionEnding.LEASE_LOST,
            replayed=replayed,
            executed=executed,
            error=why,
            clock=clock,
        )
    except DatabaseError as exc:
        log.warning("run %s: could not record the lost lease (%s)", ex.run.run_id, exc)


def _end_cancelled(ex: _Execution, clock: Clock) -> Outcome:
    """The run was cancelled while its agent executed, and the agent saw it (``RunCancelled``
    out of a model call or a wait, or at its next step): the cancel ended the execution
    ``cancelled`` already, with who and why; this adds the worker's step counts. Nothing else
    is written (the lease is gone)."""
    run_id = ex.run.run_id
    replayed, executed = ex.counts()
    try:
        transitions.execution_end(
            run_id=run_id,
            number=ex.number,
            ending=ExecutionEnding.CANCELLED,
            replayed=replayed,
            executed=executed,
            clock=clock,
        )
    except DatabaseError as exc:
        log.warning("run %s: could not record the cancelled execution's counts (%s)", run_id, exc)
    log.info("run %s: cancelled while it executed; the agent stopped", run_id)
    return Outcome(
        run_id=run_id,
        status=RunStatus.CANCELLED,
        detail=str(Run.objects.filter(pk=run_id).values_list("detail", flat=True).first() or ""),
        replayed=replayed,
        executed=executed,
    )


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


def _execute_claimed(
    ex: _Execution, clock: Clock, fence: LeaseFence, holds: Holds, waits: _Waits
) -> Outcome:
    run, token = ex.run, ex.token
    try:
        if run.wake_at is not None:
            # Released for a retry's back-off, a sleep or an event: a planned wait, not a
            # recovery, costs no budget.
            transitions.run_woke(run_id=run.run_id, token=token, clock=clock)
        elif run.executions > 1:
            _count_resume(run, token, clock)
            observe.emit("run_resumed", run_id=run.run_id)
        definition = registry.get_agent(run.agent)
        if definition is None:
            raise AgentMissing("", registry.missing_agent_message(run.agent))
        # A paused run or agent holds at the claim; a passed deadline stops the run at its first
        # step, where the context can look its started effects up first.
        holds.check_whole(run.blocked_step_id, deadline=False)
        inputs = canonical.ordered(run.inputs)  # jsonb's key order is not the first one
        ex.ctx = ctx = live_context(
            run_id=run.run_id,
            token=token,
            fence=fence,
            agent=definition,
            inputs=inputs,
            ledger=selectors.load_steps(run.run_id),
            clock=clock,
            sleep=waits.sleep,
            rand=waits.rand,
            holds=holds,
        )
        try:
            _check_plan(run, definition, token, clock)
            return _execute_agent(ex, clock, definition, ctx, inputs, waits.runner)
        except RunBlocked as exc:
            return _block(ex, clock, exc)
        finally:
            close(ctx)  # batched durability: its flusher thread ends with the execution
    except RunBlocked as exc:
        return _block(ex, clock, exc)


def _execute_agent(
    ex: _Execution,
    clock: Clock,
    definition: registry.Agent,
    ctx: RunContext,
    inputs: Any,
    runner: Runner = aio.run,
) -> Outcome:
    """Call the agent with its context; record how the call ended."""
    pooling.release()  # the claim's reads are done: the agent's first wait holds no connection
    try:
        if isinstance(ctx, AsyncRunContext):
            if not connection.in_atomic_block:
                connection.close()  # the run waits on the loop holding no connection of ours
            result = runner(_awaited_agent(definition, ctx, inputs))
        else:
            result = definition.fn(ctx, inputs)
        data = canonical.normalize(result, step_id="<run result>")
    except ContinueAsNew as signal:
        return _continue(ex, clock, signal)
    except Waiting as waiting:
        return _release(ex, clock, waiting)
    except RetryLater as later:
        return _defer(ex, clock, later)
    except HandedBack as back:
        return _hand_back(ex, clock, back)
    except RunCancelled:
        return _end_cancelled(ex, clock)
    except RunBlocked as exc:
        return _block(ex, clock, exc)
    except (StepFailed, NotJSON, DuplicateStepId, ApprovalRejected, AgentDefinitionError) as exc:
        step_id = getattr(exc, "step_id", "") or ""
        with logcontext.bound(**({"step_id": step_id} if step_id else {})):
            log.error("run %s failed: %s", ex.run.run_id, exc)
        return _finish(ex, clock, RunStatus.FAILED, error=str(exc), step_id=step_id)
    except LeaseLost:
        raise
    except Exception as exc:
        tb = traceback.format_exc(limit=8)
        log.exception("run %s: agent raised", ex.run.run_id)
        return _finish(ex, clock, RunStatus.FAILED, error=f"{exc!r}\n{tb}")
    return _finish(ex, clock, RunStatus.SUCCEEDED, result=data)


async def _awaited_agent(definition: registry.Agent, ctx: AsyncRunContext, inputs: Any) -> Any:
    """An async agent's call, awaited; a step it made and never awaited is a ``NotAwaited``."""
    result = await definition.fn(ctx, inputs)
    forgotten = ctx.unawaited()
    if forgotten is not None:
        raise NotAwaited(
            f"step {forgotten!r} was made and never awaited (write `await ctx.call(...)`)"
        )
    return result


def _count_resume(run: Run, token: str, clock: Clock) -> None:
    """Every execution after the first is a resume; at the budget the run stops loudly. The
    execution after one that a pause held is free (``Run.resume_free``)."""
    if run.resume_free:
        transitions.run_count_resume(run_id=run.run_id, token=token, free=True, clock=clock)
        run.resume_free = False
        return
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
    if ctx is not None:
        # The flusher's batches commit first, on its own connection: this thread must not hold
        # one from the pool (in the transaction below) while it waits for them.
        sync_flusher(ctx)
    with transaction.atomic():
        if ctx is not None:
            flush(ctx)
        yield


def _record_end(
    ex: _Execution,
    ending: ExecutionEnding,
    clock: Clock,
    *,
    reason: str = "",
    step_id: str = "",
    error: str = "",
) -> None:
    """The execution's one update at its end (inside the outcome's transaction)."""
    replayed, executed = ex.counts()
    transitions.execution_end(
        run_id=ex.run.run_id,
        number=ex.number,
        ending=ending,
        replayed=replayed,
        executed=executed,
        reason=reason,
        step_id=step_id,
        error=error.split("\n", 1)[0][:500],
        clock=clock,
    )


def _block(ex: _Execution, clock: Clock, exc: RunBlocked) -> Outcome:
    run, token, ctx = ex.run, ex.token, ex.ctx
    if isinstance(exc, RunPaused):
        return _hold(ex, clock, exc)
    if isinstance(exc, DeadlineReached):
        return _past_deadline(ex, clock, exc)
    if isinstance(exc, Divergence) and ctx is not None:
        notes = look_up_started(ctx)  # before the stop: what the lookups can answer, they do
        if notes:
            exc = Divergence(exc.step_id, exc.detail + "; started effects: " + "; ".join(notes))
    with _recording_outcome(ctx):
        transitions.run_block(run_id=run.run_id, token=token, why=exc, clock=clock)
        _record_end(
            ex,
            ExecutionEnding.NEEDS_ATTENTION,
            clock,
            reason=exc.reason,
            step_id=exc.step_id,
            error=exc.detail,
        )
    log.warning("run %s needs attention: %s", run.run_id, exc)
    replayed, executed = ex.counts()
    return Outcome(
        run_id=run.run_id,
        status=RunStatus.NEEDS_ATTENTION,
        reason=exc.reason,
        step_id=exc.step_id,
        detail=exc.detail,
        replayed=replayed,
        executed=executed,
    )


def _past_deadline(ex: _Execution, clock: Clock, exc: DeadlineReached) -> Outcome:
    """The run's deadline passed: it fails with reason ``deadline`` before its next step. An
    effect left ``started`` (a crash mid-send before the deadline) is looked up first, as a
    resume would: settled where its lookup answers, and named in the error where it does not
    (it is never sent again: the run stops)."""
    error = f"stopped at its deadline before step {exc.step_id!r}: {exc.detail}"
    notes = look_up_started(ex.ctx) if ex.ctx is not None else []
    if notes:
        error += "; started effects: " + "; ".join(notes)
    log.warning("run %s: %s", ex.run.run_id, error)
    return _finish(ex, clock, RunStatus.FAILED, error=error, reason=Reason.DEADLINE)


def _hold(ex: _Execution, clock: Clock, exc: RunPaused) -> Outcome:
    """A pause holds the run: it stops ``paused``, costing no resume budget."""
    with _recording_outcome(ex.ctx):
        transitions.run_hold_paused(
            run_id=ex.run.run_id,
            token=ex.token,
            pause_id=exc.pause_id,
            step_id=exc.step_id,
            detail=exc.detail,
            clock=clock,
        )
        _record_end(ex, ExecutionEnding.PAUSED, clock, step_id=exc.step_id, error=exc.detail)
    log.warning("run %s held: %s", ex.run.run_id, exc.detail)
    replayed, executed = ex.counts()
    return Outcome(
        run_id=ex.run.run_id,
        status=RunStatus.PAUSED,
        step_id=exc.step_id,
        detail=exc.detail,
        replayed=replayed,
        executed=executed,
    )


def _hand_back(ex: _Execution, clock: Clock, back: HandedBack) -> Outcome:
    run = ex.run
    with _recording_outcome(ex.ctx):
        transitions.run_hand_back(
            run_id=run.run_id, token=ex.token, step_id=back.step_id, clock=clock
        )
        _record_end(ex, ExecutionEnding.HANDED_BACK, clock, step_id=back.step_id)
    log.info("run %s handed back before step %s: this worker is stopping", run.run_id, back.step_id)
    replayed, executed = ex.counts()
    return Outcome(
        run_id=run.run_id,
        status=RunStatus.QUEUED,
        reason="handback",
        step_id=back.step_id,
        replayed=replayed,
        executed=executed,
    )


def _finish(
    ex: _Execution,
    clock: Clock,
    status: RunStatus,
    *,
    result: Any = None,
    error: str = "",
    reason: str = "",
    step_id: str = "",
) -> Outcome:
    with _recording_outcome(ex.ctx):
        transitions.run_finish(
            run_id=ex.run.run_id,
            token=ex.token,
            status=status,
            result=result,
            error=error,
            reason=reason,
            step_id=step_id,
            clock=clock,
        )
        ending = ExecutionEnding.FINISHED
        if status == RunStatus.FAILED:
            ending = ExecutionEnding.FAILED
        _record_end(ex, ending, clock, reason=reason, error=error)
    replayed, executed = ex.counts()
    return Outcome(
        run_id=ex.run.run_id,
        status=status,
        reason=reason,
        result=result,
        detail=error,
        replayed=replayed,
        executed=executed,
    )


def _defer(ex: _Execution, clock: Clock, later: RetryLater) -> Outcome:
    """A step's retry is due later than a worker may wait holding the run: release it."""
    run = ex.run
    wake_at = clock() + timedelta(seconds=later.seconds)
    detail = f"waiting to retry step {later.step_id!r}: {later.detail} (at {wake_at:%H:%M:%S})"
    if isinstance(later, RateLimited):  # its slot is kept (ledger.transitions.ratelimits)
        detail = later.detail
    with _recording_outcome(ex.ctx):
        transitions.run_defer(
            run_id=run.run_id, token=ex.token, wake_at=wake_at, detail=detail, clock=clock
        )
        _record_end(ex, ExecutionEnding.RELEASED, clock, step_id=later.step_id, error=detail)
    log.info("run %s: %s", run.run_id, detail, extra={"step_id": later.step_id})
    replayed, executed = ex.counts()
    return Outcome(
        run_id=run.run_id,
        status=RunStatus.QUEUED,
        reason="rate_limit" if isinstance(later, RateLimited) else "backoff",
        step_id=later.step_id,
        detail=detail,
        replayed=replayed,
        executed=executed,
    )


def _release(ex: _Execution, clock: Clock, waiting: Waiting) -> Outcome:
    """A sleep or a wait for an event longer than a worker may hold the run: release it until
    it is due or its event arrives (``transitions.run_wait``); it costs no resume budget."""
    run = ex.run
    with _recording_outcome(ex.ctx):
        transitions.run_wait(
            run_id=run.run_id,
            token=ex.token,
            wake_at=waiting.wake_at,
            event=waiting.event,
            detail=waiting.detail,
            clock=clock,
        )
        _record_end(
            ex, ExecutionEnding.RELEASED, clock, step_id=waiting.step_id, error=waiting.detail
        )
    log.info("run %s: %s", run.run_id, waiting.detail, extra={"step_id": waiting.step_id})
    replayed, executed = ex.counts()
    return Outcome(
        run_id=run.run_id,
        status=RunStatus.QUEUED,
        reason="event" if waiting.event else "sleep",
        step_id=waiting.step_id,
        detail=waiting.detail,
        replayed=replayed,
        executed=executed,
    )


def _continue(ex: _Execution, clock: Clock, signal: ContinueAsNew) -> Outcome:
    with _recording_outcome(ex.ctx):
        child = transitions.run_continue_as_new(
            run=ex.run, token=ex.token, inputs=signal.inputs, clock=clock
        )
        _record_end(ex, ExecutionEnding.FINISHED, clock, error=f"continued as {child.run_id}")
    log.info("run %s continued as %s", ex.run.run_id, child.run_id)
    replayed, executed = ex.counts()
    return Outcome(
        run_id=ex.run.run_id,
        status=RunStatus.SUCCEEDED,
        result={"continued_as": child.run_id},
        replayed=replayed,
        executed=executed,
        continued_as=child.run_id,
    )
