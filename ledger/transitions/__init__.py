"""The one owner of every state transition of runs and steps.

Nothing else in the project writes a ``Run`` or ``Step`` row (a test checks it). Each function
is one transition: one transaction, one compare-and-set whose row count is checked, and — when a
person caused it (dashboard, command line as ``cli:<login>``, admin) — the audit row in that
same transaction. A refused action raises an ``OperationError`` (``ledger.errors``) and changes
nothing.

- ``steps``: the engine's step writes (hand-written SQL, fenced by the lease token);
- ``lifecycle``: create, lease claim/renew, count a resume, replan, block, finish, continue as
  new, re-queue by the sweep (the workers' side);
- ``actions``: a person's resume, retry, cancel, fork of a run, and a clean run replacing it;
  ``bulk``: the same on many;
- ``settle``: a started effect looked up again, proposed, approved, rejected, applied;
- ``stale``: accept a stale step's stored result, re-execute from a step;
- ``edits``: admins' edits of ledger rows;
- ``notify``: the notification outbox (queued with the event, claimed, sent, failed).
- ``retention``: a finished run's step rows recorded as archived, then deleted in batches.

Every run a transition queues is announced after its commit through ``ledger.signals.run_queued``
(the workers connect it to their tasks: ``ledger`` never imports ``runs``); the ``on_commit=``
arguments of the operator functions are deprecated. Permission checks
(viewer/operator/approver) are the caller's; the four-eyes rule of settlements is enforced here.
Imports ``ledger.models``, ``ledger.selectors`` and ``ledger.registry``; never the engine or
``runs``.
"""

from __future__ import annotations

from ledger.errors import Conflict, InvalidInput, NotAllowed, OperationError, SelfApproval
from ledger.transitions._common import (
    MAX_REASON_CHARS,
    Actor,
    OnCommit,
    cli_actor,
    parse_result_text,
    validate_result,
)
from ledger.transitions.actions import (
    run_cancel,
    run_fork,
    run_resume,
    run_retry,
    run_start_clean,
)
from ledger.transitions.bulk import BulkOutcome, bulk_apply
from ledger.transitions.edits import RUN_EDITABLE, STEP_EDITABLE, run_admin_edit, step_admin_edit
from ledger.transitions.lifecycle import (
    Started,
    beacon_beat,
    lease_claim,
    lease_renew,
    run_block,
    run_continue_as_new,
    run_count_resume,
    run_finish,
    run_replan,
    run_requeue_expired,
    run_requeue_lost,
    run_stamp_plan,
    run_start,
    run_start_once,
)
from ledger.transitions.notify import (
    notification_claim,
    notification_failed,
    notification_sent,
    notifications_remind,
)
from ledger.transitions.retention import run_archive_record, steps_delete_archived
from ledger.transitions.settle import (
    ReconcileAnswer,
    settlement_approve,
    settlement_propose,
    settlement_reject,
    step_reconcile_again,
)
from ledger.transitions.stale import TodaysInputs, run_reexecute_from, step_accept_stale
from ledger.transitions.steps import StepWrite, step_update, step_write, step_write_batch

__all__ = [
    "MAX_REASON_CHARS",
    "RUN_EDITABLE",
    "STEP_EDITABLE",
    "Actor",
    "BulkOutcome",
    "Conflict",
    "InvalidInput",
    "NotAllowed",
    "OnCommit",
    "OperationError",
    "ReconcileAnswer",
    "SelfApproval",
    "Started",
    "StepWrite",
    "TodaysInputs",
    "beacon_beat",
    "bulk_apply",
    "cli_actor",
    "lease_claim",
    "lease_renew",
    "notification_claim",
    "notification_failed",
    "notification_sent",
    "notifications_remind",
    "parse_result_text",
    "run_admin_edit",
    "run_archive_record",
    "run_block",
    "run_cancel",
    "run_continue_as_new",
    "run_count_resume",
    "run_finish",
    "run_fork",
    "run_reexecute_from",
    "run_replan",
    "run_requeue_expired",
    "run_requeue_lost",
    "run_resume",
    "run_retry",
    "run_stamp_plan",
    "run_start",
    "run_start_clean",
    "run_start_once",
    "settlement_approve",
    "settlement_propose",
    "settlement_reject",
    "step_accept_stale",
    "step_admin_edit",
    "step_reconcile_again",
    "step_update",
    "step_write",
    "step_write_batch",
    "steps_delete_archived",
    "validate_result",
]
