"""Settling an ambiguous effect by hand: look it up again, propose, approve or reject, apply.

A ``started`` effect row whose tool could not say whether it happened stops its run with reason
``reconciliation``. A person answers for it:

- *happened*: the step becomes ``succeeded`` with the downstream system's result (validated JSON,
  size-capped) and ``settled_by`` names the people; the resume replays that result.
- *not_happened*: the step goes back to ``pending`` and KEEPS its effect key; the resume
  executes it again (attempt + 1) under the same key, so a downstream system that deduplicates
  by key still cannot do it twice.
- *abandon*: the step is ``abandoned`` and the run cancelled, with the reason.

With ``RUNLEDGER_SETTLEMENT_APPROVAL`` on (the default) the answer is a proposal that a
different person approves; off, it applies at once. Applying, queueing the run for resume and
the audit row are one transaction; the queued run is announced after it commits
(``ledger.signals.run_queued``).

Every write is a compare-and-set: the run row is locked, the step's version must equal the one
the person saw (or, for an approval, the one the proposal was made against), so of two people
settling the same step at once exactly one wins and the other gets ``Conflict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ledger import canonical, registry
from ledger.engine import aio
from ledger.errors import Conflict, InvalidInput, NotAllowed, NotJSON, SelfApproval
from ledger.models import (
    AuditAction,
    AuditEvent,
    Run,
    RunStatus,
    Settlement,
    SettlementOutcome,
    SettlementStatus,
    Step,
    StepKind,
    StepStatus,
)
from ledger.registry import NOT_HAPPENED
from ledger.selectors.operator import approval_required
from ledger.transitions import notify
from ledger.transitions._common import (
    Actor,
    Clock,
    OnCommit,
    actor_name,
    actor_user,
    cancel,
    check_not_running,
    check_step_version,
    deprecated_on_commit,
    lock_run,
    lock_step,
    queue_resume,
    record,
    require_reason,
    run_snapshot,
    settlement_snapshot,
    step_snapshot,
    validate_result,
    write_step,
)

# --- looking it up again --------------------------------------------------------------------


@dataclass(frozen=True)
class ReconcileAnswer:
    """What the tool's reconcile said just now: happened (with result), not_happened,
    unknown (it cannot know), or error (it raised, or answered something that is not JSON)."""

    outcome: str
    result: Any
    detail: str
    event: AuditEvent


def step_reconcile_again(*, step: Step, by: Actor, clock: Clock = timezone.now) -> ReconcileAnswer:
    """Ask the step's tool now whether its effect happened, and record the answer.

    Runs the lookup outside any transaction (it is I/O). It does not change the step, even on a
    definite answer: the answer is evidence for the person who settles it (and a resume asks
    the same lookup itself, so a definite answer settles the step on the next resume anyway).
    """
    if connection.in_atomic_block:
        raise RuntimeError("step_reconcile_again calls a downstream system: not in a transaction")
    name = actor_name(by)
    row = Step.objects.get(pk=step.pk)
    _check_started_effect(row)
    tool = registry.get_tool(row.tool)
    if tool is None:
        raise NotAllowed(f"tool {row.tool!r} is not registered in this process")
    if tool.reconcile is None:
        raise NotAllowed(f"tool {row.tool!r} has no read path: a person must settle this step")
    assert row.effect_key is not None
    outcome, result, detail = _ask(tool.reconcile, row.effect_key)
    event = record(
        by=name,
        action=AuditAction.RECONCILE_LOOKUP,
        at=clock(),
        run_id=row.run_id,
        step_id=row.step_id,
        after={"effect_key": row.effect_key, "outcome": outcome, "result": result},
        reason=detail,
    )
    return ReconcileAnswer(outcome=outcome, result=result, detail=detail, event=event)


def _ask(reconcile: Any, key: str) -> tuple[str, Any, str]:
    try:
        answer = aio.call_sync(reconcile, key)  # an async def lookup: on the shared loop
    except Exception as exc:
        return "error", None, f"the lookup raised {type(exc).__name__}: {exc}"[:2000]
    if answer is None:
        return "unknown", None, f"the downstream system cannot say whether key {key} took effect"
    if answer is NOT_HAPPENED:
        return "not_happened", None, f"the downstream system has no effect under key {key}"
    try:
        return "happened", canonical.normalize(answer), f"found under key {key}"
    except NotJSON as exc:
        return "error", None, f"the lookup answered something that is not JSON: {exc}"


# --- proposing, approving, rejecting --------------------------------------------------------


def settlement_propose(
    *,
    step: Step,
    outcome: str,
    reason: str,
    by: Actor,
    seen_version: int,
    result: Any = None,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
) -> Settlement:
    """Propose how a started effect ended (and, with approval off, apply it at once).

    ``result`` is the downstream system's result as parsed JSON (``parse_result_text`` turns a
    form's text into it) and is required for ``happened`` only. Refused with ``Conflict`` when
    the step's version is not ``seen_version`` or another proposal for it is already waiting.
    """
    outcome = _check_outcome(outcome)
    text = require_reason(reason)
    data = _check_result(outcome, result)
    name = actor_name(by)
    direct = not approval_required()
    with transaction.atomic():
        run = lock_run(step.run_id)
        row = lock_step(step.pk)
        check_step_version(row, seen_version)
        _check_started_effect(row)
        check_not_running(run)
        _supersede_or_refuse(row)
        settlement = Settlement.objects.create(
            run=run,
            step_row=row,
            step_id=row.step_id,
            effect_key=row.effect_key or "",
            outcome=outcome,
            result=data,
            reason=text,
            approval_required=not direct,
            step_version=row.version,
            proposed_by=actor_user(by),
            proposed_by_name=name,
            created_at=clock(),
        )
        if direct:
            _apply(
                settlement,
                run,
                row,
                by=by,
                name=name,
                reason=text,
                on_commit=deprecated_on_commit(on_commit, "settlement_propose"),
                clock=clock,
                action=AuditAction.SETTLEMENT_APPLY,
            )
        else:
            notify.notify_settlement_waiting(settlement=settlement, run=run, at=clock())
            record(
                by=name,
                action=AuditAction.SETTLEMENT_PROPOSE,
                at=clock(),
                run_id=run.run_id,
                step_id=row.step_id,
                before=step_snapshot(row),
                after=settlement_snapshot(settlement),
                reason=text,
                settlement=settlement,
            )
    return settlement


def settlement_approve(
    *,
    settlement: Settlement,
    by: Actor,
    reason: str = "",
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
) -> Settlement:
    """Approve a proposal (a different person than its proposer) and apply it.

    ``Conflict`` when the proposal was already decided, or when the step changed after it was
    proposed (then nothing is written; propose again on the current state). ``SelfApproval``
    when the proposer approves their own. The view checks the approver role.
    """
    name = actor_name(by)
    text = (reason or "").strip()
    with transaction.atomic():
        run = lock_run(settlement.run_id)
        row = lock_step(settlement.step_row_id)
        current = _lock_open(settlement)
        if current.proposed_by_name == name:
            raise SelfApproval("you proposed this settlement; a different person must approve it")
        if row.version != current.step_version:
            raise Conflict(
                "this step changed since the settlement was proposed "
                f"(version {current.step_version} → {row.version}); reject it and propose "
                "again on its current state",
                current=step_snapshot(row),
            )
        check_not_running(run)
        _apply(
            current,
            run,
            row,
            by=by,
            name=name,
            reason=text,
            on_commit=deprecated_on_commit(on_commit, "settlement_approve"),
            clock=clock,
            action=AuditAction.SETTLEMENT_APPROVE,
        )
    return current


def settlement_reject(
    *, settlement: Settlement, by: Actor, reason: str, clock: Clock = timezone.now
) -> Settlement:
    """Refuse a proposal (an approver), or withdraw it (its proposer). The step is unchanged."""
    name = actor_name(by)
    text = require_reason(reason)
    with transaction.atomic():
        current = _lock_open(settlement)
        current.status = SettlementStatus.REJECTED
        _decide(current, by=by, name=name, reason=text, at=clock())
        record(
            by=name,
            action=AuditAction.SETTLEMENT_REJECT,
            at=current.decided_at or clock(),
            run_id=current.run_id,
            step_id=current.step_id,
            before={"status": SettlementStatus.PROPOSED},
            after=settlement_snapshot(current),
            reason=text,
            settlement=current,
        )
    return current


# --- applying ---------------------------------------------------------------------------


def _apply(
    settlement: Settlement,
    run: Run,
    row: Step,
    *,
    by: Actor,
    name: str,
    reason: str,
    on_commit: OnCommit,
    clock: Clock,
    action: str,
) -> None:
    """Write the settled step, decide the settlement, queue the run; all in the caller's txn."""
    now = clock()
    before = {"step": step_snapshot(row), "run": run_snapshot(run)}
    settled_by = _settled_by(settlement, name)
    if settlement.outcome == SettlementOutcome.HAPPENED:
        write_step(
            row,
            status=StepStatus.SUCCEEDED,
            result=settlement.result,
            error="",
            finished_at=now,
            settled_by=settled_by,
            updated_at=now,
        )
    elif settlement.outcome == SettlementOutcome.NOT_HAPPENED:
        # The effect key stays: the resume sends the effect again under the same key.
        write_step(
            row,
            status=StepStatus.PENDING,
            result=None,
            finished_at=None,
            settled_by=settled_by,
            updated_at=now,
        )
    else:
        write_step(
            row, status=StepStatus.ABANDONED, finished_at=now, settled_by=settled_by, updated_at=now
        )
    settlement.status = SettlementStatus.APPLIED
    _decide(settlement, by=by, name=name, reason=reason, at=now)
    if settlement.outcome == SettlementOutcome.ABANDON:
        queued = _abandon_run(run, name=name, reason=settlement.reason, clock=clock)
    else:
        queued = queue_resume(run, cause="settled", on_commit=on_commit, clock=clock)
    settlement.run = run
    record(
        by=name,
        action=action,
        at=now,
        run_id=run.run_id,
        step_id=row.step_id,
        before=before,
        after={"step": step_snapshot(row), "run": run_snapshot(run), "resume": queued},
        reason=reason or settlement.reason,
        settlement=settlement,
    )


def _abandon_run(run: Run, *, name: str, reason: str, clock: Clock) -> str:
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        return f"the run was already {run.status}"
    cancel(run, detail=f"abandoned by {name}: {reason}", clock=clock)
    return "run cancelled"


def _settled_by(settlement: Settlement, name: str) -> str:
    if name == settlement.proposed_by_name:
        return name[:150]
    return f"{settlement.proposed_by_name}, approved by {name}"[:150]


def _decide(settlement: Settlement, *, by: Actor, name: str, reason: str, at: Any) -> None:
    settlement.decided_by = actor_user(by)
    settlement.decided_by_name = name
    settlement.decided_at = at
    settlement.decision_reason = reason
    settlement.save(
        update_fields=["status", "decided_by", "decided_by_name", "decided_at", "decision_reason"]
    )


def _lock_open(settlement: Settlement) -> Settlement:
    current = Settlement.objects.select_for_update().get(pk=settlement.pk)
    if current.status != SettlementStatus.PROPOSED:
        raise Conflict(
            f"this settlement was already {current.status}"
            + (f" by {current.decided_by_name}" if current.decided_by_name else ""),
            current=settlement_snapshot(current),
        )
    return current


def _supersede_or_refuse(row: Step) -> None:
    """One open proposal per step: a waiting one blocks a second, unless it is out of date."""
    for waiting in Settlement.objects.select_for_update().filter(
        step_row=row, status=SettlementStatus.PROPOSED
    ):
        if waiting.step_version == row.version:
            raise Conflict(
                f"{waiting.proposed_by_name} already proposed '{waiting.outcome}' for this step; "
                "it waits for approval (reject it first to propose something else)",
                current=settlement_snapshot(waiting),
            )
        waiting.status = SettlementStatus.SUPERSEDED
        waiting.save(update_fields=["status"])


def _check_started_effect(row: Step) -> None:
    if row.kind != StepKind.EFFECT or row.status != StepStatus.STARTED:
        raise NotAllowed(
            f"step {row.step_id!r} is a {row.status} {row.kind} step; only a started effect "
            "(its outcome unknown) is settled by hand"
        )


def _check_outcome(outcome: str) -> str:
    if outcome not in SettlementOutcome.values:
        raise InvalidInput(
            f"outcome must be one of {', '.join(SettlementOutcome.values)}, not {outcome!r}"
        )
    return outcome


def _check_result(outcome: str, result: Any) -> Any:
    if outcome != SettlementOutcome.HAPPENED:
        if result is not None:
            raise InvalidInput("only 'it happened' carries a result")
        return None
    if result is None:
        raise InvalidInput(
            "enter the downstream system's result (e.g. the provider's charge) as JSON"
        )
    return validate_result(result)
