"""A run's life as the workers drive it: created, claimed, renewed, counted, finished, blocked,
continued, re-queued by the sweep. Each function is one compare-and-set on the run row whose
row count is checked; writes made while a worker executes the agent carry its lease token, so a
worker whose lease was taken (or whose run was cancelled) changes nothing and gets ``LeaseLost``.

Every change of a run's state bumps ``Run.version`` (a heartbeat does not), which operator
actions compare with the version a person saw.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger import canonical, registry, signals
from ledger.conf import conf
from ledger.errors import ApprovalRequired, LeaseLost, RunBlocked
from ledger.inputs import check_run_id
from ledger.models import (
    ACTIVE_STATUSES,
    AuditAction,
    Beacon,
    Execution,
    ExecutionEnding,
    Run,
    RunStatus,
)
from ledger.selectors import ExpiredLease
from ledger.transitions import events, gates, notify
from ledger.transitions._common import TAKEN_LEASE, Actor, actor_name, record

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

#: The fields that release a run's lease (finish, block, cancel, re-queue).
_RELEASED: dict[str, Any] = {"lease_token": None, "lease_owner": "", "lease_expires_at": None}


def run_start(
    *,
    agent: str,
    inputs: Any,
    run_id: str | None = None,
    max_resumes: int | None = None,
    clock: Clock = timezone.now,
    parent: Run | None = None,
    parent_kind: str = "",
    forked_from_step_id: str = "",
    by: Actor | None = None,
    reason: str = "",
) -> Run:
    """Create a queued run of a registered agent. Inputs must be JSON and hold what the agent
    ``requires``; a chosen ``run_id`` must match ``ledger.inputs.RUN_ID_PATTERN``
    (``InvalidInput`` otherwise: nothing is written). The run's title and labels are made from
    the inputs by the agent's declaration.

    ``parent``/``parent_kind`` record lineage (``"continue"`` for a continuation, ``"fork"``).
    ``by``: the person who started it (a command's ``cli:<login>``), audited with ``reason``;
    None for runs the system starts (continuations, and forks, which audit themselves).

    A run without a parent is announced after the commit (``signals.run_queued``, cause
    ``start``); a run made from another is announced by the transition that made it.
    """
    definition = registry.get_agent(agent)
    if definition is None:
        raise LookupError(f"no agent named {agent!r} is registered")
    data = canonical.normalize(inputs, step_id="<run inputs>")
    definition.check_inputs(data)
    now = clock()
    budget = max_resumes if max_resumes is not None else definition.max_resumes
    run = Run(
        agent=agent,
        inputs=data,
        title=definition.title_for(data),
        labels=definition.labels_for(data),
        status=RunStatus.QUEUED,
        plan_version=definition.plan_version,
        tool_schema_hash=definition.tool_schema_hash,
        code_version=definition.code_version,
        max_resumes=budget if budget is not None else conf.RUNLEDGER_DEFAULT_MAX_RESUMES,
        created_at=now,
        updated_at=now,
        status_changed_at=now,
        parent=parent,
        parent_kind=parent_kind,
        forked_from_step_id=forked_from_step_id,
    )
    if run_id is not None:
        run.run_id = check_run_id(run_id)  # InvalidInput: the documented set only
    with transaction.atomic():
        run.save(force_insert=True)
        if by is not None:
            record(
                by=actor_name(by),
                action=AuditAction.RUN_START,
                at=now,
                run_id=run.run_id,
                after={"agent": agent, "inputs": data, "max_resumes": run.max_resumes},
                reason=reason.strip() or "started by hand",
            )
        if parent is None:
            signals.send_run_queued_on_commit(run_id=run.run_id, cause="start")
    return run


# --- the lease -----------------------------------------------------------------------------


def lease_claim(
    *, run_id: str, owner: str, seconds: float | None = None, clock: Clock = timezone.now
) -> str | None:
    """Claim a queued or running run whose lease is free or expired; return the new token.

    A compare-and-set on the run row: of any number of workers claiming at once, one wins. A
    run released for a retry's back-off is not claimable before its ``wake_at``. The
    expiry of a lease it takes over is kept in ``prior_lease_expires_at``, and ``executions``
    (the fencing token the tools receive) grows by one.
    """
    now = clock()
    token = secrets.token_hex(16)
    ttl = timedelta(seconds=seconds or conf.RUNLEDGER_LEASE_SECONDS)
    claimed = (
        Run.objects.filter(pk=run_id, status__in=ACTIVE_STATUSES)
        .filter(Q(lease_token__isnull=True) | Q(lease_expires_at__lt=now))
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lte=now))
        .update(
            lease_owner=owner[:200],
            lease_token=token,
            lease_expires_at=now + ttl,
            heartbeat_at=now,
            status=RunStatus.RUNNING,
            updated_at=now,
            executions=F("executions") + 1,
            version=F("version") + 1,
            **TAKEN_LEASE,
        )
    )
    return token if claimed == 1 else None


def lease_renew(
    *, run_id: str, token: str, seconds: float | None = None, clock: Clock = timezone.now
) -> bool:
    """Extend a held lease (the heartbeat); False when it is no longer ours."""
    now = clock()
    ttl = timedelta(seconds=seconds or conf.RUNLEDGER_LEASE_SECONDS)
    return (
        Run.objects.filter(pk=run_id, lease_token=token, status=RunStatus.RUNNING).update(
            lease_expires_at=now + ttl, heartbeat_at=now
        )
        == 1
    )


# --- while a worker holds the lease ------------------------------------------------------


def _fenced(run_id: str, token: str, **changes: Any) -> None:
    """One compare-and-set on a running run held by ``token``; ``LeaseLost`` otherwise."""
    runs = Run.objects.filter(pk=run_id, lease_token=token, status=RunStatus.RUNNING)
    if runs.update(**changes, version=F("version") + 1) != 1:
        raise LeaseLost(run_id)


def run_count_resume(
    *, run_id: str, token: str, free: bool = False, clock: Clock = timezone.now
) -> None:
    """Count one resume (every execution after the first is one), except the one after an
    execution that a pause held (``free``): that one clears the flag instead."""
    if free:
        _fenced(run_id, token, resume_free=False, updated_at=clock())
        return
    _fenced(run_id, token, resume_count=F("resume_count") + 1, updated_at=clock())


def run_woke(*, run_id: str, token: str, clock: Clock = timezone.now) -> None:
    """The execution that a retry's back-off released the run for: it clears ``wake_at`` and,
    unlike a resume after a crash, costs no resume budget."""
    _fenced(run_id, token, wake_at=None, updated_at=clock())


def run_defer(
    *, run_id: str, token: str, wake_at: datetime, detail: str, clock: Clock = timezone.now
) -> None:
    """Release a running run whose step's next attempt is due at ``wake_at`` (a back-off too
    long to wait holding the lease): queued, claimable from then, and announced after the
    commit with that time (``signals.run_queued``, cause ``backoff``, ``eta``). If the message
    is lost, the sweep re-queues the run once it is overdue."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=RunStatus.QUEUED,
            wake_at=wake_at,
            detail=detail,
            **_RELEASED,
            updated_at=now,
            status_changed_at=now,
        )
        signals.send_run_queued_on_commit(run_id=run_id, cause="backoff", eta=wake_at)


def run_hold_paused(
    *,
    run_id: str,
    token: str,
    pause_id: int,
    step_id: str,
    detail: str,
    clock: Clock = timezone.now,
) -> None:
    """Stop a running run as ``paused`` by the pause ``pause_id``, releasing its lease; the
    next execution (once the pause is lifted) costs no resume budget."""
    now = clock()
    _fenced(
        run_id,
        token,
        status=RunStatus.PAUSED,
        pause_id=pause_id,
        resume_free=True,
        reason="",
        blocked_step_id=step_id,
        detail=detail,
        **_RELEASED,
        updated_at=now,
        status_changed_at=now,
    )


def run_replan(*, run_id: str, token: str, clock: Clock = timezone.now) -> None:
    """Record today's plan version and tool schema on a run that resumes under ``replan``."""
    run = Run.objects.only("agent").get(pk=run_id)
    definition = registry.get_agent(run.agent)
    assert definition is not None
    _fenced(
        run_id,
        token,
        plan_version=definition.plan_version,
        tool_schema_hash=definition.tool_schema_hash,
        code_version=definition.code_version,
        updated_at=clock(),
    )


def run_block(*, run_id: str, token: str, why: RunBlocked, clock: Clock = timezone.now) -> None:
    """Stop a running run as needs_attention with the reason, the step and the detail; the
    notification that a person is needed is queued in the same transaction (an outbox). At an
    approval gate (``ApprovalRequired``) the gate is opened in it too, with its own notification."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=RunStatus.NEEDS_ATTENTION,
            reason=why.reason,
            blocked_step_id=why.step_id,
            detail=why.detail,
            **_RELEASED,
            updated_at=now,
            status_changed_at=now,
        )
        if isinstance(why, ApprovalRequired):
            gates.gate_open(run_id=run_id, why=why, now=now)  # its own notification, once
        else:
            notify.notify_run_blocked(run_id=run_id, at=now)
        notify.notify_run_event(run_id=run_id, at=now)


def run_finish(
    *,
    run_id: str,
    token: str,
    status: RunStatus,
    result: Any = None,
    error: str = "",
    clock: Clock = timezone.now,
) -> None:
    """End a running run as succeeded or failed, releasing its lease; its completion event is
    queued for the subscribed applications in the same transaction (an outbox)."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=status,
            result=result,
            error=error,
            reason="",
            blocked_step_id="",
            detail="",
            **_RELEASED,
            updated_at=now,
            status_changed_at=now,
            finished_at=now,
        )
        notify.notify_run_event(run_id=run_id, at=now)


def run_continue_as_new(*, run: Run, token: str, inputs: Any, clock: Clock = timezone.now) -> Run:
    """Finish the run as succeeded and queue its continuation, in one fenced transaction.

    A worker that lost its lease creates nothing; a worker that dies after the commit leaves a
    finished run that no one executes again, so there is exactly one continuation. The workers
    learn of the new run through ``signals.run_queued`` (sent after the commit).
    """
    with transaction.atomic():
        child = run_start(
            agent=run.agent,
            inputs=inputs,
            max_resumes=run.max_resumes,
            clock=clock,
            parent=run,
            parent_kind="continue",
        )
        # An application that subscribed to this run follows its work into the continuation.
        events.subscriptions_follow(from_run_id=run.run_id, to_run_id=child.run_id, clock=clock)
        run_finish(
            run_id=run.run_id,
            token=token,
            status=RunStatus.SUCCEEDED,
            result={"continued_as": child.run_id},
            clock=clock,
        )  # LeaseLost rolls the new run back
        signals.send_run_queued_on_commit(run_id=child.run_id, cause="continue")
    return child


def run_hand_back(*, run_id: str, token: str, step_id: str, clock: Clock = timezone.now) -> None:
    """A draining worker gives a running run back: the lease is released and the run queued
    again at once (announced, so another worker continues it without waiting for the lease to
    expire). Fenced: a worker that lost its lease hands back nothing. The execution that
    continues it costs no resume budget (``resume_free``): a deploy is not the run's fault."""
    now = clock()
    with transaction.atomic():
        _fenced(
            run_id,
            token,
            status=RunStatus.QUEUED,
            resume_free=True,
            **_RELEASED,
            detail=f"handed back before step {step_id!r} by a stopping worker; re-queued",
            updated_at=now,
            status_changed_at=now,
        )
        signals.send_run_queued_on_commit(run_id=run_id, cause="handback")


# --- recovery: the lease sweep ------------------------------------------------------------


def run_requeue_expired(*, lease: ExpiredLease, clock: Clock = timezone.now) -> bool:
    """Put a run whose lease expired back in the queue; True for the one caller that did.

    A compare-and-set on the token the sweep saw: if the worker renewed in the meantime, another
    worker claimed the run, or another sweeper re-queued it first, nothing changes. Clearing the
    token fences the old worker for good: if it wakes up, every write it tries is refused.
    """
    now = clock()
    run_id, owner = lease.run_id, lease.owner or "?"
    runs = Run.objects.filter(pk=run_id, status=RunStatus.RUNNING, lease_token=lease.token)
    if lease.token is not None:
        runs = runs.filter(lease_expires_at__lt=now)
    why = f"worker {owner} stopped renewing its lease; re-queued by the sweep"
    with transaction.atomic():
        updated = runs.update(
            status=RunStatus.QUEUED,
            **TAKEN_LEASE,
            **_RELEASED,
            detail=why,
            updated_at=now,
            status_changed_at=now,
            version=F("version") + 1,
        )
        if updated == 1:
            Execution.objects.filter(run_id=run_id, ended_at__isnull=True).update(
                ending=ExecutionEnding.CRASHED, ended_at=now, error=f"found by the sweep: {why}"
            )
    if updated == 1:
        log.warning("run %s: lease of %s expired; re-queued", run_id, owner)
        signals.send_run_queued_on_commit(run_id=run_id, cause="recovery")
    return updated == 1


def run_requeue_lost(*, run_id: str, seen_at: datetime, clock: Clock = timezone.now) -> bool:
    """Claim the right to enqueue a lost run once more (compare-and-set on updated_at)."""
    now = clock()
    updated = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED, updated_at=seen_at).update(
        updated_at=now
    )
    if updated == 1:
        log.warning("run %s: queued since %s with no worker; enqueued again", run_id, seen_at)
        signals.send_run_queued_on_commit(run_id=run_id, cause="recovery")
    return updated == 1


# --- the execution record -----------------------------------------------------------------


def execution_begin(
    *,
    run_id: str,
    number: int,
    worker: str,
    host: str = "",
    pid: int | None = None,
    task_id: str = "",
    clock: Clock = timezone.now,
) -> None:
    """Record that execution ``number`` of the run began (one insert, after the claim)."""
    Execution(
        run_id=run_id,
        number=number,
        worker=worker[:200],
        host=host[:200],
        pid=pid,
        task_id=task_id[:200],
        started_at=clock(),
    ).save(force_insert=True)


def execution_end(
    *,
    run_id: str,
    number: int,
    ending: ExecutionEnding,
    replayed: int = 0,
    executed: int = 0,
    reason: str = "",
    step_id: str = "",
    error: str = "",
    clock: Clock = timezone.now,
) -> bool:
    """Record how execution ``number`` ended (one update); False when its end was recorded
    already (the sweep found it crashed first: a lost lease then corrects that)."""
    open_rows = Execution.objects.filter(run_id=run_id, number=number)
    if ending == ExecutionEnding.LEASE_LOST:
        open_rows = open_rows.filter(ending__in=(ExecutionEnding.RUNNING, ExecutionEnding.CRASHED))
    else:
        open_rows = open_rows.filter(ended_at__isnull=True)
    return (
        open_rows.update(
            ending=ending,
            ended_at=clock(),
            replayed=replayed,
            executed=executed,
            reason=reason[:20],
            step_id=step_id[:255],
            error=error[:2000],
        )
        == 1
    )


def beacon_beat(*, name: str, detail: dict[str, Any], clock: Clock = timezone.now) -> None:
    """Record that a periodic duty ran (the sweep's heartbeat on the runs list)."""
    Beacon.objects.update_or_create(name=name, defaults={"at": clock(), "detail": detail})


def beacon_forget(*, name: str) -> None:
    """Drop a beacon (a worker's, when it stops)."""
    Beacon.objects.filter(name=name).delete()
