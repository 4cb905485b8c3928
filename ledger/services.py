"""Run-level functions that the workers, the commands and the dashboard call.

Writes to a run's row are compare-and-set updates whose row count is checked; writes made while
a worker executes the agent carry its lease token, so a worker whose lease was taken (or whose
run was cancelled) changes nothing. Every change of a run's state bumps ``Run.version`` (a
heartbeat does not), which operator actions compare with the version a person saw.
"""

from __future__ import annotations

import logging
import secrets
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger import canonical, registry, signals, store
from ledger.engine import RunContext
from ledger.errors import (
    AgentMissing,
    BudgetExhausted,
    ContinueAsNew,
    Divergence,
    DuplicateStepId,
    LeaseLost,
    NotJSON,
    RunBlocked,
    StepFailed,
)
from ledger.models import ACTIVE_STATUSES, Beacon, Run, RunStatus

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


# --- starting ------------------------------------------------------------------------------


def run_start(
    *,
    agent: str,
    inputs: Any,
    run_id: str | None = None,
    max_resumes: int | None = None,
    clock: Clock = timezone.now,
    parent: Run | None = None,
    parent_kind: str = "",
) -> Run:
    """Create a queued run of a registered agent. Inputs must be JSON (checked here).

    ``parent``/``parent_kind`` record lineage (``"continue"`` for a continuation).
    """
    definition = registry.get_agent(agent)
    if definition is None:
        raise LookupError(f"no agent named {agent!r} is registered")
    data = canonical.normalize(inputs, step_id="<run inputs>")
    now = clock()
    budget = max_resumes if max_resumes is not None else definition.max_resumes
    run = Run(
        agent=agent,
        inputs=data,
        status=RunStatus.QUEUED,
        plan_version=definition.plan_version,
        tool_schema_hash=definition.tool_schema_hash,
        code_version=definition.code_version,
        max_resumes=budget if budget is not None else settings.RUNLEDGER_DEFAULT_MAX_RESUMES,
        created_at=now,
        updated_at=now,
        status_changed_at=now,
        parent=parent,
        parent_kind=parent_kind,
    )
    if run_id is not None:
        if not run_id or len(run_id) > 64:
            raise ValueError("a run id is 1 to 64 characters")
        run.run_id = run_id
    run.save(force_insert=True)
    return run


# --- the lease -----------------------------------------------------------------------------


def lease_claim(
    *, run_id: str, owner: str, seconds: float | None = None, clock: Clock = timezone.now
) -> str | None:
    """Claim a queued or running run whose lease is free or expired; return the new token.

    A compare-and-set on the run row: of any number of workers claiming at once, one wins.
    """
    now = clock()
    token = secrets.token_hex(16)
    ttl = timedelta(seconds=seconds or settings.RUNLEDGER_LEASE_SECONDS)
    claimed = (
        Run.objects.filter(pk=run_id, status__in=ACTIVE_STATUSES)
        .filter(Q(lease_token__isnull=True) | Q(lease_expires_at__lt=now))
        .update(
            lease_owner=owner[:200],
            lease_token=token,
            lease_expires_at=now + ttl,
            heartbeat_at=now,
            status=RunStatus.RUNNING,
            updated_at=now,
            executions=F("executions") + 1,
            version=F("version") + 1,
        )
    )
    return token if claimed == 1 else None


def lease_renew(
    *, run_id: str, token: str, seconds: float | None = None, clock: Clock = timezone.now
) -> bool:
    """Extend a held lease (the heartbeat); False when it is no longer ours."""
    now = clock()
    ttl = timedelta(seconds=seconds or settings.RUNLEDGER_LEASE_SECONDS)
    return (
        Run.objects.filter(pk=run_id, lease_token=token, status=RunStatus.RUNNING).update(
            lease_expires_at=now + ttl, heartbeat_at=now
        )
        == 1
    )


def lease_release(*, run_id: str, token: str) -> bool:
    return (
        Run.objects.filter(pk=run_id, lease_token=token).update(
            lease_token=None, lease_expires_at=None, lease_owner=""
        )
        == 1
    )


class Heartbeat:
    """Renews a lease from a background thread while the agent executes."""

    def __init__(self, *, run_id: str, token: str, seconds: float) -> None:
        self.run_id, self.token, self.seconds = run_id, token, seconds
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
                if not lease_renew(run_id=self.run_id, token=self.token, seconds=self.seconds):
                    self.lost.set()
                    return
        except Exception:
            log.exception("heartbeat for run %s failed", self.run_id)
        finally:
            connection.close()


# --- executing -----------------------------------------------------------------------------


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
    seconds = lease_seconds or settings.RUNLEDGER_LEASE_SECONDS
    token = lease_claim(run_id=run_id, owner=worker, seconds=seconds, clock=clock)
    if token is None:
        log.info("run %s: not claimable by %s (missing, finished or leased)", run_id, worker)
        return None
    run = Run.objects.get(pk=run_id)
    try:
        if heartbeat:
            with Heartbeat(run_id=run_id, token=token, seconds=seconds):
                return _execute_claimed(run, token, clock)
        return _execute_claimed(run, token, clock)
    except LeaseLost:
        log.warning("run %s: %s lost its lease; it wrote nothing more and stops", run_id, worker)
        return None
    finally:
        close_old_connections()


def _execute_claimed(run: Run, token: str, clock: Clock) -> Outcome:
    try:
        if run.executions > 1:
            _count_resume(run, token, clock)
        definition = registry.get_agent(run.agent)
        if definition is None:
            errors = registry.import_errors()
            why = "; ".join(f"{m}: {e}" for m, e in errors.items()) or "not registered"
            raise AgentMissing("", f"agent {run.agent!r} is not available here ({why})")
        _check_plan(run, definition, token, clock)
        ctx = RunContext(
            run_id=run.run_id,
            token=token,
            agent=definition,
            inputs=run.inputs,
            ledger=store.load_steps(run.run_id),
            clock=clock,
        )
        try:
            result = definition.fn(ctx, run.inputs)
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
    except RunBlocked as exc:
        return _block(run, token, clock, exc, None)


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
    updated = Run.objects.filter(pk=run.run_id, lease_token=token).update(
        resume_count=F("resume_count") + 1, updated_at=clock(), version=F("version") + 1
    )
    if updated != 1:
        raise LeaseLost(run.run_id)
    run.resume_count += 1


def _check_plan(run: Run, definition: registry.Agent, token: str, clock: Clock) -> None:
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
    updated = Run.objects.filter(pk=run.run_id, lease_token=token).update(
        plan_version=definition.plan_version,
        tool_schema_hash=definition.tool_schema_hash,
        code_version=definition.code_version,
        updated_at=clock(),
        version=F("version") + 1,
    )
    if updated != 1:
        raise LeaseLost(run.run_id)


def _block(run: Run, token: str, clock: Clock, exc: RunBlocked, ctx: RunContext | None) -> Outcome:
    now = clock()
    updated = Run.objects.filter(pk=run.run_id, lease_token=token, status=RunStatus.RUNNING).update(
        status=RunStatus.NEEDS_ATTENTION,
        reason=exc.reason,
        blocked_step_id=exc.step_id,
        detail=exc.detail,
        lease_token=None,
        lease_owner="",
        lease_expires_at=None,
        updated_at=now,
        status_changed_at=now,
        version=F("version") + 1,
    )
    if updated != 1:
        raise LeaseLost(run.run_id)
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
    status: str,
    *,
    result: Any = None,
    error: str = "",
    ctx: RunContext,
) -> Outcome:
    now = clock()
    updated = Run.objects.filter(pk=run.run_id, lease_token=token, status=RunStatus.RUNNING).update(
        status=status,
        result=result,
        error=error,
        reason="",
        blocked_step_id="",
        detail="",
        lease_token=None,
        lease_owner="",
        lease_expires_at=None,
        updated_at=now,
        status_changed_at=now,
        finished_at=now,
        version=F("version") + 1,
    )
    if updated != 1:
        raise LeaseLost(run.run_id)
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
    """Finish the run as succeeded and queue its continuation, in one fenced transaction.

    A worker that lost its lease creates nothing; a worker that dies after the commit leaves a
    finished run that no one executes again, so there is exactly one continuation. The workers
    learn of the new run through ``signals.run_queued`` (sent after the commit).
    """
    now = clock()
    with transaction.atomic():
        child = run_start(
            agent=run.agent,
            inputs=signal.inputs,
            max_resumes=run.max_resumes,
            clock=clock,
            parent=run,
            parent_kind="continue",
        )
        result = {"continued_as": child.run_id}
        updated = Run.objects.filter(
            pk=run.run_id, lease_token=token, status=RunStatus.RUNNING
        ).update(
            status=RunStatus.SUCCEEDED,
            result=result,
            error="",
            reason="",
            blocked_step_id="",
            detail="",
            lease_token=None,
            lease_owner="",
            lease_expires_at=None,
            updated_at=now,
            status_changed_at=now,
            finished_at=now,
            version=F("version") + 1,
        )
        if updated != 1:
            raise LeaseLost(run.run_id)  # rolls the new run back
        signals.send_run_queued_on_commit(run_id=child.run_id, cause="continue")
    log.info("run %s continued as %s", run.run_id, child.run_id)
    return Outcome(
        run_id=run.run_id,
        status=RunStatus.SUCCEEDED,
        result=result,
        replayed=ctx.replayed,
        executed=ctx.executed,
        continued_as=child.run_id,
    )


# --- recovery: the lease sweep ------------------------------------------------------------


@dataclass(frozen=True)
class ExpiredLease:
    """A running run whose worker stopped renewing its lease, as the sweep saw it."""

    run_id: str
    token: str | None
    owner: str
    expires_at: datetime | None


def runs_with_expired_leases(
    *, clock: Clock = timezone.now, limit: int = 100
) -> list[ExpiredLease]:
    """Running runs whose lease ran out: the worker died, froze, or lost its machine."""
    rows = (
        Run.objects.filter(status=RunStatus.RUNNING)
        .filter(Q(lease_expires_at__lt=clock()) | Q(lease_token__isnull=True))
        .order_by("lease_expires_at")
        .values_list("run_id", "lease_token", "lease_owner", "lease_expires_at")[:limit]
    )
    return [ExpiredLease(*row) for row in rows]


def run_requeue_expired(*, lease: ExpiredLease, clock: Clock = timezone.now) -> bool:
    """Put a run whose lease expired back in the queue; True for the one caller that did.

    A compare-and-set on the token the sweep saw: if the worker renewed in the meantime, another
    worker claimed the run, or another sweeper re-queued it first, nothing changes. Clearing the
    token fences the old worker for good: if it wakes up, every write it tries is refused.
    """
    now = clock()
    runs = Run.objects.filter(pk=lease.run_id, status=RunStatus.RUNNING, lease_token=lease.token)
    if lease.token is not None:
        runs = runs.filter(lease_expires_at__lt=now)
    updated = runs.update(
        status=RunStatus.QUEUED,
        lease_token=None,
        lease_owner="",
        lease_expires_at=None,
        detail=f"worker {lease.owner or '?'} stopped renewing its lease; re-queued by the sweep",
        updated_at=now,
        status_changed_at=now,
        version=F("version") + 1,
    )
    if updated == 1:
        log.warning("run %s: lease of %s expired; re-queued", lease.run_id, lease.owner or "?")
    return updated == 1


def runs_lost_in_queue(
    *, older_than: float, clock: Clock = timezone.now, limit: int = 100
) -> list[tuple[str, datetime]]:
    """Queued runs untouched for ``older_than`` seconds: their message was lost on the way."""
    cutoff = clock() - timedelta(seconds=older_than)
    rows = (
        Run.objects.filter(status=RunStatus.QUEUED, updated_at__lt=cutoff)
        .order_by("updated_at")
        .values_list("run_id", "updated_at")[:limit]
    )
    return list(rows)


def run_requeue_lost(*, run_id: str, seen_at: datetime, clock: Clock = timezone.now) -> bool:
    """Claim the right to enqueue a lost run once more (compare-and-set on updated_at)."""
    now = clock()
    updated = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED, updated_at=seen_at).update(
        updated_at=now
    )
    if updated == 1:
        log.warning("run %s: queued since %s with no worker; enqueued again", run_id, seen_at)
    return updated == 1


def runs_sweep(
    *, lost_after: float | None = None, clock: Clock = timezone.now, limit: int = 100
) -> list[str]:
    """One pass of the sweep; returns the runs that this caller must enqueue for a worker.

    Two sweepers at once each get a disjoint list: every re-queue is a compare-and-set.
    """
    wait = settings.RUNLEDGER_REQUEUE_QUEUED_AFTER_SECONDS if lost_after is None else lost_after
    expired = runs_with_expired_leases(clock=clock, limit=limit)
    ids = [lease.run_id for lease in expired if run_requeue_expired(lease=lease, clock=clock)]
    for run_id, seen_at in runs_lost_in_queue(older_than=wait, clock=clock, limit=limit):
        if run_requeue_lost(run_id=run_id, seen_at=seen_at, clock=clock):
            ids.append(run_id)
    Beacon.objects.update_or_create(
        name="sweep", defaults={"at": clock(), "detail": {"requeued": len(ids)}}
    )
    return ids


# --- operator actions on whole runs ---------------------------------------------------------


def run_resume(*, run_id: str, max_resumes: int | None = None, clock: Clock = timezone.now) -> Run:
    """Queue a stopped run for a worker to resume; optionally raise its resume budget.

    Allowed from needs_attention and failed; a worker then replays the ledger from the top.
    """
    now = clock()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status not in (RunStatus.NEEDS_ATTENTION, RunStatus.FAILED):
            raise ValueError(f"run {run_id} is {run.status}; only a stopped run can be resumed")
        if max_resumes is not None:
            if max_resumes < run.max_resumes:
                raise ValueError("a resume budget can be raised, not lowered")
            run.max_resumes = max_resumes
        elif run.reason == "budget" and run.resume_count >= run.max_resumes:
            raise ValueError("the resume budget is used up: raise it to resume")
        run.status, run.reason, run.detail = RunStatus.QUEUED, "", ""
        run.blocked_step_id = ""
        run.error = ""
        run.finished_at = None
        run.updated_at = run.status_changed_at = now
        run.version += 1
        run.save()
    return run


def run_cancel(*, run_id: str, clock: Clock = timezone.now) -> Run:
    """Cancel is final: the lease token is revoked, so a late worker's writes are refused."""
    now = clock()
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
            raise ValueError(f"run {run_id} is already {run.status}")
        run.status = RunStatus.CANCELLED
        run.lease_token, run.lease_owner, run.lease_expires_at = None, "", None
        run.updated_at = run.status_changed_at = run.finished_at = now
        run.version += 1
        run.save()
    return run
