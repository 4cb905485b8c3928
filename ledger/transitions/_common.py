"""What every transition a person causes shares: who acts, the reason, JSON checks, row locks,
the audit row, and the two run writes several actions end in (queue for resume, cancel)."""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.db.models.functions import Coalesce

from ledger import canonical, signals
from ledger.conf import conf
from ledger.errors import Busy, Conflict, InvalidInput, NotAllowed, NotJSON
from ledger.inputs import parse_json_text
from ledger.models import (
    STOPPED_STATUSES,
    AuditEvent,
    Execution,
    ExecutionEnding,
    Run,
    RunStatus,
    Settlement,
    Step,
)
from ledger.signatures import signature_of
from ledger.transitions import notify

#: Who acts: a Django user (``request.user``; an anonymous or inactive one is refused) or a name
#: (a script, a command).
Actor = AbstractBaseUser | AnonymousUser | str
#: Deprecated: a function called with a run id after the commit that queued the run. The ledger
#: announces every queued run through ``ledger.signals.run_queued``; see ``announce_queued``.
OnCommit = Callable[[str], None] | None
Clock = Callable[[], datetime]

MAX_REASON_CHARS = 4000

#: Kept when a lease is taken from a holder that may still be alive (a claim over an expired
#: lease, the sweep's re-queue, a cancel): see ``ledger.engine.fence``. In one UPDATE every SET
#: reads the row as it was, so this is the expiry being released.
TAKEN_LEASE: dict[str, Any] = {
    "prior_lease_expires_at": Coalesce(F("lease_expires_at"), F("prior_lease_expires_at"))
}


def actor_name(by: Actor) -> str:
    if isinstance(by, str):
        name = by.strip()
    else:
        if not by.is_authenticated or not by.is_active:
            raise InvalidInput("only a signed-in, active user can act on the ledger")
        name = by.get_username()
    if not name:
        raise InvalidInput("an action needs a named actor")
    return name[:150]


def cli_actor() -> str:
    """The actor a command acts as: ``cli:<login>`` of the person running it."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        login = f"uid{os.getuid()}"
    return f"cli:{login}"


def actor_user(by: Actor) -> Any:
    """The user row to link to, or None for a named script."""
    return by if isinstance(by, AbstractBaseUser) else None


def require_reason(reason: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise InvalidInput("a reason is required: say why, for the audit")
    if len(text) > MAX_REASON_CHARS:
        raise InvalidInput(f"the reason is longer than {MAX_REASON_CHARS} characters")
    return text


def max_result_bytes() -> int:
    return int(conf.RUNLEDGER_MAX_SETTLEMENT_RESULT_BYTES)


def validate_result(value: Any, *, what: str = "the result") -> Any:
    """``value`` in canonical JSON form, or ``InvalidInput`` saying what is wrong with it."""
    try:
        data, text = canonical.canonical(value)
    except NotJSON as exc:
        raise InvalidInput(f"{what} is not JSON: {exc}") from None
    size, limit = len(text.encode("utf-8")), max_result_bytes()
    if size > limit:
        raise InvalidInput(f"{what} is {size} bytes of JSON; the limit is {limit} bytes")
    return data


def parse_result_text(text: str) -> Any:
    """Parse a result typed into a form; ``InvalidInput`` with the line and column when bad."""
    if not (text or "").strip():
        raise InvalidInput("enter the downstream system's result as JSON")
    if len(text.encode("utf-8")) > 4 * max_result_bytes():
        raise InvalidInput(f"the result is far larger than the {max_result_bytes()} byte limit")
    value = parse_json_text(text, what="the result")
    return validate_result(value)


# --- snapshots for Conflict and the audit ------------------------------------------------


def step_snapshot(step: Step) -> dict[str, Any]:
    return {
        "step_id": step.step_id,
        "kind": step.kind,
        "status": step.status,
        "result": step.result,
        "attempt": step.attempt,
        "effect_key": step.effect_key,
        "input_hash": step.input_hash,
        "next_step_id": step.next_step_id,
        "settled_by": step.settled_by,
        "error": step.error,
        "version": step.version,
    }


def run_snapshot(run: Run) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "status": run.status,
        "reason": run.reason,
        "blocked_step_id": run.blocked_step_id,
        "detail": run.detail,
        "resume_count": run.resume_count,
        "max_resumes": run.max_resumes,
        "lease_owner": run.lease_owner,
        "version": run.version,
    }


def settlement_snapshot(settlement: Settlement) -> dict[str, Any]:
    return {
        "settlement": settlement.pk,
        "step_id": settlement.step_id,
        "outcome": settlement.outcome,
        "result": settlement.result,
        "status": settlement.status,
        "proposed_by": settlement.proposed_by_name,
        "decided_by": settlement.decided_by_name,
        "step_version": settlement.step_version,
        "reason": settlement.reason,
    }


def record(
    *,
    by: str,
    action: str,
    at: datetime,
    run_id: str = "",
    step_id: str = "",
    before: Any = None,
    after: Any = None,
    reason: str = "",
    settlement: Settlement | None = None,
) -> AuditEvent:
    """Append one audit event (call it inside the transaction that makes the change)."""
    event = audit_event(
        by=by,
        action=action,
        at=at,
        run_id=run_id,
        step_id=step_id,
        before=before,
        after=after,
        reason=reason,
        settlement=settlement,
    )
    event.save(force_insert=True)
    return event


def audit_event(
    *,
    by: str,
    action: str,
    at: datetime,
    run_id: str = "",
    step_id: str = "",
    before: Any = None,
    after: Any = None,
    reason: str = "",
    settlement: Settlement | None = None,
) -> AuditEvent:
    """The audit event ``record`` appends, unsaved (for ``bulk_create`` of many)."""
    return AuditEvent(
        actor=by,
        at=at,
        action=action,
        run_id=run_id,
        step_id=step_id,
        before=_jsonable(before),
        after=_jsonable(after),
        reason=reason,
        settlement=settlement,
    )


def _jsonable(value: Any) -> Any:
    # Snapshots hold JSON from the ledger plus the odd datetime; store datetimes as ISO text.
    return json.loads(json.dumps(value, default=_iso)) if value is not None else None


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


# --- locks and checks ----------------------------------------------------------------------


#: SQLSTATE of PostgreSQL's lock_not_available (a lock wait past ``lock_timeout``).
LOCK_NOT_AVAILABLE = "55P03"


class LockRefused(Exception):
    """A bounded lock wait (``bounded_lock_wait``) ran out: another session holds the row."""


@contextlib.contextmanager
def bounded_lock_wait(seconds: float) -> Iterator[None]:
    """One transaction in which no statement waits longer than ``seconds`` for a lock
    (PostgreSQL's ``lock_timeout``, local to the transaction: a pooler in transaction mode
    keeps it too). Past it the transaction rolls back and ``LockRefused`` is raised: recovery
    skips what another session holds (a frozen worker's, another sweep's) and comes back to it
    on its next pass, instead of waiting behind it. Elsewhere (SQLite) a plain transaction."""
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT set_config('lock_timeout', %s, true)",
                        [f"{max(1, round(seconds * 1000))}ms"],
                    )
            yield
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
            raise
        raise LockRefused(str(exc).strip()) from exc


def lock_run(run_id: str) -> Run:
    """The run row FOR UPDATE: every operator action and every engine write on the run
    (which takes it FOR SHARE) is serialized behind it. Always lock the run before its steps.

    Called by operator actions only (inside their transaction). On PostgreSQL the wait for the
    row is bounded by ``RUNLEDGER_ACTION_LOCK_WAIT_SECONDS`` (``lock_timeout`` for this one
    statement, the session's own restored after it): past it the action raises ``Busy`` and
    its transaction writes nothing, instead of waiting behind the holder until the server's
    own timeouts answer for it (an HTTP 503, a gunicorn worker killed). Once the run row is
    held, every other writer of the run's rows queues behind it, so the action's later locks
    do not wait long."""
    if connection.vendor != "postgresql":
        return Run.objects.select_for_update().get(pk=run_id)
    wait = conf.RUNLEDGER_ACTION_LOCK_WAIT_SECONDS
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
            [f"{max(1, round(wait * 1000))}ms"],
        )
        (before, _) = cursor.fetchone()
        try:
            with transaction.atomic():  # a savepoint: a refused wait leaves a usable transaction
                run = Run.objects.select_for_update().get(pk=run_id)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            raise Busy(run_id, waited=wait) from None
        finally:  # whatever happened, the session's own lock_timeout again
            cursor.execute("SELECT set_config('lock_timeout', %s, true)", [before])
    return run


def lock_step(pk: int) -> Step:
    return Step.objects.select_for_update().get(pk=pk)


def check_step_version(step: Step, seen_version: int) -> None:
    if step.version != seen_version:
        raise Conflict(
            f"this step changed since you opened it (version {seen_version} → {step.version}); "
            "look at its current state and decide again",
            current=step_snapshot(step),
        )


def check_run_version(run: Run, seen_version: int | None) -> None:
    if seen_version is not None and run.version != seen_version:
        raise Conflict(
            f"this run changed since you opened it (version {seen_version} → {run.version}): "
            f"it is now {run.status}" + (f" ({run.reason})" if run.reason else ""),
            current=run_snapshot(run),
        )


def check_not_running(run: Run) -> None:
    if run.status == RunStatus.RUNNING:
        raise NotAllowed(
            f"a worker ({run.lease_owner or 'unknown'}) is executing run {run.run_id} right now; "
            "act once it has stopped"
        )


def requeue(run: Run, *, max_resumes: int | None, clock: Clock) -> None:
    """Put a stopped run (locked by the caller) back in the queue, optionally raising its
    resume budget (never lowering it). ``NotAllowed`` when it cannot go: the budget is used up.
    """
    if run.status not in STOPPED_STATUSES:
        raise NotAllowed(f"run {run.run_id} is {run.status}; only a stopped run can be resumed")
    budget = run.max_resumes
    if max_resumes is not None:
        if max_resumes < run.max_resumes:
            raise NotAllowed("a resume budget can be raised, not lowered")
        budget = max_resumes
    elif run.reason == "budget" and run.resume_count >= run.max_resumes:
        raise NotAllowed("the resume budget is used up: raise it to resume")
    now = clock()
    write_run(
        run,
        status=RunStatus.QUEUED,
        reason="",
        detail="",
        blocked_step_id="",
        error="",
        finished_at=None,
        max_resumes=budget,
        updated_at=now,
        status_changed_at=now,
    )


def cancel(run: Run, *, detail: str, clock: Clock) -> None:
    """Cancel a run (locked by the caller, in the caller's transaction) for good: the lease
    token is revoked in the same write, so a worker still executing it has every later write
    refused. The subscribed applications' ``run.cancelled`` is queued with it, and the
    execution in progress (if any) ends ``cancelled`` with ``detail`` as its error: its worker,
    refused at its next write, only adds its step counts (``execution_end``); a worker that
    never comes back leaves no execution open."""
    now = clock()
    write_run(
        run,
        status=RunStatus.CANCELLED,
        reason="",
        detail=detail[:MAX_REASON_CHARS],
        **TAKEN_LEASE,
        lease_token=None,
        lease_owner="",
        lease_expires_at=None,
        updated_at=now,
        status_changed_at=now,
        finished_at=now,
    )
    Execution.objects.filter(run_id=run.run_id, ended_at__isnull=True).update(
        ending=ExecutionEnding.CANCELLED, ended_at=now, error=detail[:2000]
    )
    notify.notify_run_event(run_id=run.run_id, at=now)  # run.cancelled, with the cancel


def write_run(run: Run, **changes: Any) -> None:
    """One compare-and-set on the locked run's version; ``run`` is refreshed to match. A change
    that blocks or fails the run records its cause with it (``stop_cause``)."""
    if changes.get("status") in (RunStatus.NEEDS_ATTENTION, RunStatus.FAILED):
        changes = {**stop_cause(changes["status"], changes), **changes}
    updated = Run.objects.filter(pk=run.run_id, version=run.version).update(
        **changes, version=F("version") + 1
    )
    if updated != 1:  # the caller holds the row lock: this is a bug, not a race
        raise Conflict(f"run {run.run_id} changed under its row lock", current=run_snapshot(run))
    run.refresh_from_db()


def write_step(row: Step, **changes: Any) -> None:
    """One compare-and-set on the locked step's version; ``row`` is updated to match."""
    updated = Step.objects.filter(pk=row.pk, version=row.version).update(
        **changes, version=F("version") + 1
    )
    if updated != 1:
        raise Conflict(f"step {row.step_id} changed under its row lock", current=step_snapshot(row))
    for key, value in changes.items():
        setattr(row, key, value)
    row.version += 1


def deprecated_on_commit(on_commit: OnCommit, function: str) -> OnCommit:
    """``on_commit=`` of the operator functions, kept working for callers written before
    ``run_queued`` announced every queued run (it is called too, after the same commit)."""
    if on_commit is not None:
        warnings.warn(
            f"{function}(on_commit=...) is deprecated and will be removed: every queued run is "
            "announced through ledger.signals.run_queued, which the workers enqueue",
            DeprecationWarning,
            stacklevel=3,
        )
    return on_commit


def announce_queued(run_id: str, *, cause: str, on_commit: OnCommit = None) -> None:
    """After the commit that queued ``run_id``: ``signals.run_queued`` (the one way a queued
    run reaches the workers), and a deprecated caller's ``on_commit``."""
    signals.send_run_queued_on_commit(run_id=run_id, cause=cause)
    if on_commit is not None:
        transaction.on_commit(lambda: on_commit(run_id))


def queue_resume(run: Run, *, cause: str, on_commit: OnCommit, clock: Clock) -> str:
    """After a ledger change, put a stopped run back in the queue (same transaction) and
    announce it for after the commit (``cause``). Returns what happened, in words.
    """
    if run.status in STOPPED_STATUSES:
        try:
            requeue(run, max_resumes=None, clock=clock)
        except NotAllowed as exc:  # e.g. the resume budget is used up: the change stands
            return f"not queued: {exc}"
    elif run.status != RunStatus.QUEUED:
        return f"not queued: the run is {run.status}"
    announce_queued(run.run_id, cause=cause, on_commit=on_commit)
    return "queued for a worker to resume"


def stop_cause(status: str, changes: dict[str, Any]) -> dict[str, str]:
    """The cause columns a change that blocks or fails a run writes with it (the incidents
    page groups on them): the step (a blocked run's ``blocked_step_id``, a failed run's
    ``cause_step`` when the change names one) and the signature of its detail or error."""
    if status == RunStatus.NEEDS_ATTENTION:
        step, text = changes.get("blocked_step_id", ""), changes.get("detail", "")
    else:
        step, text = changes.get("cause_step", ""), changes.get("error", "")
    return {"cause_step": str(step or "")[:255], "signature": signature_of(str(text or ""))}
