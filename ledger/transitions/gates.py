"""Approval gates: an effect asked for, approved or rejected by people, used once by the engine.

An effect tool declared with ``approval=`` (or a single ``ctx.call(..., approval=...)``) never
writes its intent row before a person approved its exact arguments:

- ``gate_open`` (inside ``run_block``'s transaction): the run stops ``needs_attention`` with
  reason ``approval`` and a ``Gate`` row holds the canonical arguments, their digest (the step's
  input hash) and the expiry; an open gate for the same step with other arguments, or expired, is
  made void. The gate's notification is queued in that transaction, once per gate.
- ``gate_approve`` / ``gate_reject`` (dashboard, command line, API, signed link): one
  compare-and-set on the locked gate and run; the audit row in the same transaction. Approved
  by enough distinct people, the run is queued to resume; rejected, the run is queued to resume
  (``on_reject="raise"``: the call raises ``ApprovalRejected`` in the agent) or fails at once
  (``on_reject="fail"``).
- ``gate_use`` (the engine, in the transaction of the effect's intent row, fenced by the lease):
  approved, same digest, not expired, not used — or the intent is not written.

Refusals (``OperationError``) write nothing: a gate that is not waiting (decided, void, used),
a run that does not wait at that gate, an expired gate, a second approval by the same person,
a link signed for another user, expired, or used before.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ledger.errors import ApprovalRequired, Conflict, NotAllowed, SelfApproval
from ledger.models import (
    OPEN_GATE_STATUSES,
    AuditAction,
    Gate,
    GateStatus,
    Reason,
    Run,
    RunStatus,
)
from ledger.transitions import notify
from ledger.transitions._common import (
    MAX_REASON_CHARS,
    Actor,
    Clock,
    actor_name,
    lock_run,
    queue_resume,
    record,
    require_reason,
    run_snapshot,
    write_run,
)

# --- the engine's side ------------------------------------------------------------------------


def gate_open(*, run_id: str, why: ApprovalRequired, now: datetime) -> Gate:
    """The run stops at a gate (call inside the transaction that blocks it): the open gate of
    this step when it asks the same (same digest, not expired), else a new one — any other open
    gate of the step is made void first. A new gate's notification is queued with it."""
    kept = None
    for gate in Gate.objects.select_for_update().filter(
        run_id=run_id, step_id=why.step_id, status__in=OPEN_GATE_STATUSES
    ):
        if gate.digest == why.digest and gate.expires_at > now and kept is None:
            kept = gate
            continue
        void = "the arguments changed" if gate.digest != why.digest else "it expired unused"
        _void(gate, why=void)
    if kept is not None:
        return kept
    gate = Gate.objects.create(
        run_id=run_id,
        step_id=why.step_id,
        tool=why.tool,
        arguments_text=why.arguments_text,
        digest=why.digest,
        approvers_required=why.approvers,
        on_reject=why.on_reject,
        created_at=now,
        expires_at=now + timedelta(seconds=why.expires_after),
    )
    notify.notify_gate_waiting(gate=gate, run=Run.objects.get(pk=run_id), at=now)
    return gate


def _void(gate: Gate, *, why: str) -> None:
    Gate.objects.filter(pk=gate.pk).update(
        status=GateStatus.VOID, void_reason=why[:200], version=F("version") + 1
    )


def gate_use(*, gate_id: int, digest: str, now: datetime) -> bool:
    """Use an approved gate for the effect's intent (call in the intent's transaction, whose
    fenced step write rolls this back when the lease is lost). False: it is not approved, was
    used, asks for other arguments, or expired — the intent must not be written."""
    return (
        Gate.objects.filter(
            pk=gate_id, status=GateStatus.APPROVED, digest=digest, expires_at__gt=now
        ).update(status=GateStatus.USED, used_at=now, version=F("version") + 1)
        == 1
    )


# --- a person's side ----------------------------------------------------------------------------


def gate_approve(
    *,
    gate: Gate,
    by: Actor,
    reason: str = "",
    link_nonce: str = "",
    clock: Clock = timezone.now,
) -> Gate:
    """Approve a waiting gate. With ``approvers_required=2`` the first approval leaves it
    waiting for a second, different person; the last one queues the run to resume.

    ``Conflict``: the gate was decided (or voided, or used) already — the second of two people
    clicking at once gets this. ``SelfApproval``: the same person approves twice.
    ``NotAllowed``: the gate expired, or the run does not wait at it; ``link_nonce``: the link
    was used before. Nothing is written then.
    """
    name = actor_name(by)
    text = (reason or "").strip()[:MAX_REASON_CHARS]
    with transaction.atomic():
        run, current = _lock_waiting(gate, clock(), link_nonce=link_nonce)
        if name in current.approved_by:
            raise SelfApproval(
                f"you already approved this gate; a different person must give approval "
                f"{len(current.approved_by) + 1} of {current.approvers_required}"
            )
        now = clock()
        before = _snapshot(current)
        current.approved_by = [*current.approved_by, name]
        done = len(current.approved_by) >= current.approvers_required
        if done:
            current.status = GateStatus.APPROVED
            current.decided_by_name, current.decided_at = name, now
            current.decision_reason = text
        _save(current, link_nonce=link_nonce)
        queued = queue_resume(run, cause="approved", on_commit=None, clock=clock) if done else ""
        _audit(
            AuditAction.GATE_APPROVE, name, now, run, current, before, text or "approved", queued
        )
    return current


def gate_reject(
    *,
    gate: Gate,
    by: Actor,
    reason: str,
    link_nonce: str = "",
    clock: Clock = timezone.now,
) -> Gate:
    """Reject a waiting gate (any one approver, with a reason). ``on_reject="raise"``: the run is
    queued and the call raises ``ApprovalRejected`` in the agent; ``"fail"``: the run fails now.
    Refused as ``gate_approve`` is (nothing written)."""
    name = actor_name(by)
    text = require_reason(reason)
    with transaction.atomic():
        run, current = _lock_waiting(gate, clock(), link_nonce=link_nonce)
        now = clock()
        before = _snapshot(current)
        current.status = GateStatus.REJECTED
        current.decided_by_name, current.decided_at, current.decision_reason = name, now, text
        _save(current, link_nonce=link_nonce)
        if current.on_reject == "fail":
            write_run(
                run,
                status=RunStatus.FAILED,
                reason="",
                blocked_step_id="",
                detail="",
                error=f"step {current.step_id!r}: the effect was rejected by {name}: {text}",
                updated_at=now,
                status_changed_at=now,
                finished_at=now,
            )
            outcome = "run failed"
        else:
            outcome = queue_resume(run, cause="rejected", on_commit=None, clock=clock)
        _audit(AuditAction.GATE_REJECT, name, now, run, current, before, text, outcome)
    return current


def _audit(
    action: str, name: str, at: datetime, run: Run, gate: Gate, before: Any, why: str, then: str
) -> None:
    """The decision's audit row (in its transaction): the gate before and after, the run, and
    what became of the run (``then``)."""
    record(
        by=name,
        action=action,
        at=at,
        run_id=run.run_id,
        step_id=gate.step_id,
        before=before,
        after={**_snapshot(gate), "run": run_snapshot(run), "then": then},
        reason=why,
    )


def _lock_waiting(gate: Gate, now: datetime, *, link_nonce: str) -> tuple[Run, Gate]:
    """The run and the gate, locked (run first), checked to be waiting for a decision."""
    run = lock_run(gate.run_id)
    current = Gate.objects.select_for_update().get(pk=gate.pk)
    if current.status != GateStatus.WAITING:
        by = f" by {current.decided_by_name}" if current.decided_by_name else ""
        why = f" ({current.void_reason})" if current.void_reason else ""
        raise Conflict(
            f"this gate was already {current.status}{by}{why}; nothing was changed",
            current=_snapshot(current),
        )
    if current.expires_at <= now:
        raise NotAllowed(
            f"this gate expired at {current.expires_at:%Y-%m-%d %H:%M:%S} UTC; resume the run "
            "to ask again"
        )
    waiting = (
        run.status == RunStatus.NEEDS_ATTENTION
        and run.reason == Reason.APPROVAL
        and run.blocked_step_id == current.step_id
    )
    if not waiting:
        raise NotAllowed(
            f"run {run.run_id} does not wait at step {current.step_id!r} (it is {run.status}"
            + (f", {run.reason}" if run.reason else "")
            + "); nothing was changed"
        )
    if link_nonce and link_nonce in current.links_used:
        raise NotAllowed("this approval link was used already; open the gate in the dashboard")
    return run, current


def _save(gate: Gate, *, link_nonce: str) -> None:
    if link_nonce:
        gate.links_used = [*gate.links_used, link_nonce]
    updated = Gate.objects.filter(pk=gate.pk, version=gate.version).update(
        status=gate.status,
        approved_by=gate.approved_by,
        decided_by_name=gate.decided_by_name,
        decided_at=gate.decided_at,
        decision_reason=gate.decision_reason,
        links_used=gate.links_used,
        version=F("version") + 1,
    )
    if updated != 1:  # the row is locked: a bug, not a race
        raise Conflict(f"gate {gate.pk} changed under its row lock")
    gate.version += 1


def _snapshot(gate: Gate) -> dict[str, Any]:
    return {
        "gate": gate.pk,
        "tool": gate.tool,
        "digest": gate.digest,
        "status": gate.status,
        "approved_by": list(gate.approved_by),
        "approvers_required": gate.approvers_required,
        "on_reject": gate.on_reject,
        "expires_at": gate.expires_at.isoformat(),
    }
