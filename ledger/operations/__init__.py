"""Operator actions on the ledger: what the dashboard, the admin and scripts call.

Every function here is a plain function with keyword-only arguments that either changes the
ledger completely (rows, an audit event, the run queued for resume, all in one transaction) or
raises an ``OperationError`` and changes nothing:

- ``Conflict`` — the row moved since the person opened it (``.current`` holds its state now);
- ``NotAllowed`` (and ``SelfApproval``) — the action does not apply in the present state;
- ``InvalidInput`` — a missing reason, a result that is not JSON or too large.

``by`` is the acting Django user (or a name, for scripts). ``on_commit(run_id)`` is called after
the commit that queued a run (the dashboard passes a function that enqueues the Celery task:
``ledger`` never imports ``runs``). Permission checks (viewer/operator/approver) are the
caller's; the four-eyes rule of settlements is enforced here. Reading functions (selectors)
write nothing: opening a form is not an action.
"""

from __future__ import annotations

from ledger.operations._common import Actor, OnCommit, parse_result_text, validate_result
from ledger.operations.bulk import (
    BULK_ACTIONS,
    BulkOutcome,
    BulkPlan,
    BulkPlanItem,
    RunFilter,
    bulk_apply,
    bulk_preview,
)
from ledger.operations.edits import (
    RUN_EDITABLE,
    STEP_EDITABLE,
    EditMark,
    edited_upstream,
    run_admin_edit,
    step_admin_edit,
)
from ledger.operations.errors import (
    Conflict,
    InvalidInput,
    NotAllowed,
    OperationError,
    SelfApproval,
)
from ledger.operations.queries import (
    Evidence,
    QueueItem,
    audit_events,
    settlement_evidence,
    settlement_is_outdated,
    settlement_queue,
    settlement_queue_steps,
    settlements_waiting,
)
from ledger.operations.runs import run_cancel, run_fork, run_resume, run_retry
from ledger.operations.settle import (
    ReconcileAnswer,
    approval_required,
    settlement_approve,
    settlement_propose,
    settlement_reject,
    step_reconcile_again,
)
from ledger.operations.stale import run_reexecute_from, step_accept_stale

__all__ = [
    "BULK_ACTIONS",
    "RUN_EDITABLE",
    "STEP_EDITABLE",
    "Actor",
    "BulkOutcome",
    "BulkPlan",
    "BulkPlanItem",
    "Conflict",
    "EditMark",
    "Evidence",
    "InvalidInput",
    "NotAllowed",
    "OnCommit",
    "OperationError",
    "QueueItem",
    "ReconcileAnswer",
    "RunFilter",
    "SelfApproval",
    "approval_required",
    "audit_events",
    "bulk_apply",
    "bulk_preview",
    "edited_upstream",
    "parse_result_text",
    "run_admin_edit",
    "run_cancel",
    "run_fork",
    "run_reexecute_from",
    "run_resume",
    "run_retry",
    "settlement_approve",
    "settlement_evidence",
    "settlement_is_outdated",
    "settlement_propose",
    "settlement_queue",
    "settlement_queue_steps",
    "settlement_reject",
    "settlements_waiting",
    "step_accept_stale",
    "step_admin_edit",
    "step_reconcile_again",
    "validate_result",
]
