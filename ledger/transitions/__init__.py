"""The one owner of every state transition of runs and steps.

Nothing else in the project writes a ``Run`` or ``Step`` row (a test checks it). Each function
is one transition: one transaction, one compare-and-set whose row count is checked, and — when a
person caused it (dashboard, command line as ``cli:<login>``, admin) — the audit row in that
same transaction. A refused action raises an ``OperationError`` (``ledger.errors``) and changes
nothing.

- ``steps``: the engine's step writes (hand-written SQL, fenced by the lease token);
- ``starts``: many runs started in one transaction (a batch start);
- ``lifecycle``: create, lease claim/renew, count a resume, release for a retry's back-off
  (defer) and wake, replan, block, hold paused, finish, continue as new, re-queue by the
  sweep, the execution record (the workers' side);
- ``actions``: a person's resume, retry, cancel, fork of a run, and a clean run replacing it;
  ``bulk``: the same on many;
- ``settle``: a started effect looked up again, proposed, approved, rejected, applied;
- ``stale``: accept a stale step's stored result, re-execute from a step;
- ``edits``: admins' edits of ledger rows;
- ``notify``: the notification outbox (queued with the event, claimed, sent, failed), completion
  events included;
- ``events``: applications' webhook subscriptions to completion events (subscribe, remove).
- ``gates``: approval gates opened (with the block), approved, rejected, used by the engine
  (``gate_links``: the signed links in their notifications);
- ``pacing``: the claim of a run with a concurrency key, and the offer of a freed slot;
- ``pauses``: an operator's pause of a tool, an agent or a run, its lift, and its expiry;
- ``alerts``: alert rules' incidents opened, refreshed, resolved and acknowledged, with pages;
- ``schedules``: a person's add, pause, resume and removal of a schedule; the schedules'
  pass moving a schedule's next tick on (``schedule_advance``);
- ``mailbox``: an event sent to a run, taken by the step that waits for it; a run released
  while it sleeps or waits for an event;
- ``retention``: a finished run's step rows recorded as archived, then deleted in batches;
- ``stream``: the events an agent emits (``ctx.emit``), appended once across executions.
- ``people``: a person's roles replaced from their identity provider's groups (audited).

Every run a transition queues is announced after its commit through ``ledger.signals.run_queued``
(the workers connect it to their tasks: ``ledger`` never imports ``runs``); the ``on_commit=``
arguments of the operator functions are deprecated. Permission checks
(viewer/operator/approver) are the caller's; the four-eyes rule of settlements is enforced here.
Imports ``ledger.models``, ``ledger.selectors`` and ``ledger.registry``; never the engine or
``runs``.
"""

from __future__ import annotations

from ledger.errors import (
    BatchRefused,
    Busy,
    Conflict,
    InvalidInput,
    NotAllowed,
    OperationError,
    SelfApproval,
    WouldStopAgain,
)
from ledger.transitions._common import (
    MAX_REASON_CHARS,
    Actor,
    OnCommit,
    actor_name,
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
from ledger.transitions.events import subscribe, subscriptions_follow, unsubscribe
from ledger.transitions.gate_links import GateLink, gate_link_check, gate_link_token
from ledger.transitions.gates import gate_approve, gate_open, gate_reject, gate_use
from ledger.transitions.lifecycle import (
    HeldLease,
    Pace,
    Started,
    beacon_beat,
    beacon_forget,
    execution_begin,
    execution_end,
    lease_claim,
    lease_renew,
    leases_renew,
    priority_swap,
    run_block,
    run_continue_as_new,
    run_count_resume,
    run_defer,
    run_finish,
    run_hand_back,
    run_hold_paused,
    run_replan,
    run_requeue_expired,
    run_requeue_lost,
    run_stamp_plan,
    run_start,
    run_start_once,
    run_wake_due,
    run_woke,
)
from ledger.transitions.mailbox import (
    Sent,
    event_send,
    mailbox_take,
    question_answer,
    question_timeout,
    run_wait,
)
from ledger.transitions.notify import (
    notification_claim,
    notification_failed,
    notification_sent,
    notifications_remind,
    notify_run_event,
)
from ledger.transitions.pacing import runs_fail_past_deadline, slots_offer
from ledger.transitions.pauses import pause_create, pause_lift, pauses_expire
from ledger.transitions.people import roles_replaced
from ledger.transitions.retention import (
    retention_mark_advance,
    run_archive_record,
    runs_archive_record,
    steps_delete_archived,
)
from ledger.transitions.schedules import (
    schedule_add,
    schedule_advance,
    schedule_pause,
    schedule_remove,
    schedule_resume,
)
from ledger.transitions.settle import (
    ReconcileAnswer,
    settlement_approve,
    settlement_propose,
    settlement_reject,
    step_reconcile_again,
)
from ledger.transitions.stale import TodaysInputs, run_reexecute_from, step_accept_stale
from ledger.transitions.starts import MAX_BATCH, run_start_many
from ledger.transitions.steps import StepWrite, step_update, step_write, step_write_batch
from ledger.transitions.stream import stream_append

__all__ = [
    "MAX_BATCH",
    "MAX_REASON_CHARS",
    "RUN_EDITABLE",
    "STEP_EDITABLE",
    "Actor",
    "BatchRefused",
    "BulkOutcome",
    "Busy",
    "Conflict",
    "GateLink",
    "HeldLease",
    "InvalidInput",
    "NotAllowed",
    "OnCommit",
    "OperationError",
    "Pace",
    "ReconcileAnswer",
    "SelfApproval",
    "Sent",
    "Started",
    "StepWrite",
    "TodaysInputs",
    "WouldStopAgain",
    "actor_name",
    "beacon_beat",
    "beacon_forget",
    "bulk_apply",
    "cli_actor",
    "event_send",
    "execution_begin",
    "execution_end",
    "gate_approve",
    "gate_link_check",
    "gate_link_token",
    "gate_open",
    "gate_reject",
    "gate_use",
    "lease_claim",
    "lease_renew",
    "leases_renew",
    "mailbox_take",
    "notification_claim",
    "notification_failed",
    "notification_sent",
    "notifications_remind",
    "notify_run_event",
    "parse_result_text",
    "pause_create",
    "pause_lift",
    "pauses_expire",
    "priority_swap",
    "question_answer",
    "question_timeout",
    "retention_mark_advance",
    "roles_replaced",
    "run_admin_edit",
    "run_archive_record",
    "run_block",
    "run_cancel",
    "run_continue_as_new",
    "run_count_resume",
    "run_defer",
    "run_finish",
    "run_fork",
    "run_hand_back",
    "run_hold_paused",
    "run_reexecute_from",
    "run_replan",
    "run_requeue_expired",
    "run_requeue_lost",
    "run_resume",
    "run_retry",
    "run_stamp_plan",
    "run_start",
    "run_start_clean",
    "run_start_many",
    "run_start_once",
    "run_wait",
    "run_wake_due",
    "run_woke",
    "runs_archive_record",
    "runs_fail_past_deadline",
    "schedule_add",
    "schedule_advance",
    "schedule_pause",
    "schedule_remove",
    "schedule_resume",
    "settlement_approve",
    "settlement_propose",
    "settlement_reject",
    "slots_offer",
    "step_accept_stale",
    "step_admin_edit",
    "step_reconcile_again",
    "step_update",
    "step_write",
    "step_write_batch",
    "steps_delete_archived",
    "stream_append",
    "subscribe",
    "subscriptions_follow",
    "unsubscribe",
    "validate_result",
]
