"""Every read of the ledger, in one place: named queries that return rows or querysets ready to
render, with their ``select_related`` applied. Nothing here writes (opening a form is not an
action); one ``RunFilter`` serves the runs list, bulk actions and the commands.

- ``runs``: the runs list (counts, filter, keyset pages), one run, its step chain, the export,
  what the sweep looks for;
- ``operator``: the settlement queue and evidence, proposals waiting, the audit, admin-edit
  marks;
- ``alerts``: what the alert rules watch, their incidents, stopped runs grouped by cause;
- ``bulk``: what a bulk action would do to each run (the preview of ``bulk_apply``);
- ``ledger``: the engine's read of a run's whole ledger in one query;
- ``failures``: each step's failed attempts (type, message, traceback, what came next);
- ``gates``: approval gates (the engine's look-up, the Approvals queue);
- ``pauses``: active pauses, the pauses list, what a lift would queue, a run's executions;
- ``schedules``: the schedules, one by id or name, a schedule's runs;
- ``retention``: finished runs whose steps can be archived, a run's archive;
- ``stream``: the events a run's agent emitted, after the last one a client saw.

Imports models only: never ``ledger.transitions``, ``ledger.engine`` or ``runs``.
"""

from __future__ import annotations

from ledger.selectors.alerts import (
    GROUPS_SHOWN,
    CauseGroup,
    alerts_open,
    alerts_recent,
    incident_groups,
    incident_runs,
    tool_of_step,
)
from ledger.selectors.bulk import (
    BULK_ACTIONS,
    BULK_LIMIT,
    BulkPlan,
    BulkPlanItem,
    bulk_preview,
)
from ledger.selectors.effects import effect_audits, findings_for_run
from ledger.selectors.failures import AttemptFailure, attempt_failures, run_failures
from ledger.selectors.gates import gate_get, gate_latest, gate_queue, gates_of_run
from ledger.selectors.ledger import StepRow, load_steps
from ledger.selectors.mailbox import (
    MAILBOX_SHOWN,
    Question,
    mailbox_of_run,
    question_of,
    questions_timed_out,
)
from ledger.selectors.operator import (
    NOTIFICATION_STATUSES,
    EditMark,
    Evidence,
    QueueItem,
    approval_required,
    audit_events,
    edited_upstream,
    notifications_of_run,
    notifications_page,
    runs_named,
    settlement_evidence,
    settlement_is_outdated,
    settlement_queue,
    settlement_queue_steps,
    settlements_waiting,
    webhook_subscriptions,
)
from ledger.selectors.pauses import (
    ActivePauses,
    ExecutionRow,
    active_pauses,
    active_pauses_of,
    pause_held,
    pauses_list,
    run_executions,
)
from ledger.selectors.retention import (
    retention_mark,
    run_archive,
    run_archives,
    runs_to_prune,
)
from ledger.selectors.runs import (
    LEASE_EXPIRED,
    ORDERS,
    RESULT_HEAD_CHARS,
    RUN_SEARCH_DOC,
    Chain,
    Cursor,
    ExpiredLease,
    Progress,
    RunFilter,
    RunPage,
    SentAgain,
    StatusCounts,
    StepPage,
    SweepHealth,
    audit_page,
    effects_of_run,
    effects_sent_again,
    fork_kept,
    ledger_export,
    run_children,
    run_detail,
    run_progress,
    run_status_counts,
    run_titles,
    runs_by_ids,
    runs_due_to_wake,
    runs_filtered,
    runs_lost_in_queue,
    runs_page,
    runs_with_expired_leases,
    search_condition,
    search_words,
    settlement_detail,
    step_chain,
    step_of_run,
    step_page,
    steps_after,
    steps_by_id,
    steps_for_page,
    sweep_health,
)
from ledger.selectors.schedules import schedule_named, schedule_runs, schedules_list
from ledger.selectors.stream import run_status, stream_after, stream_tail
from ledger.selectors.timeline import WaterfallRow, step_waterfall

__all__ = [
    "BULK_ACTIONS",
    "BULK_LIMIT",
    "GROUPS_SHOWN",
    "LEASE_EXPIRED",
    "MAILBOX_SHOWN",
    "NOTIFICATION_STATUSES",
    "ORDERS",
    "RESULT_HEAD_CHARS",
    "RUN_SEARCH_DOC",
    "ActivePauses",
    "AttemptFailure",
    "BulkPlan",
    "BulkPlanItem",
    "CauseGroup",
    "Chain",
    "Cursor",
    "EditMark",
    "Evidence",
    "ExecutionRow",
    "ExpiredLease",
    "Progress",
    "Question",
    "QueueItem",
    "RunFilter",
    "RunPage",
    "SentAgain",
    "StatusCounts",
    "StepPage",
    "StepRow",
    "SweepHealth",
    "WaterfallRow",
    "active_pauses",
    "active_pauses_of",
    "alerts_open",
    "alerts_recent",
    "approval_required",
    "attempt_failures",
    "audit_events",
    "audit_page",
    "bulk_preview",
    "edited_upstream",
    "effect_audits",
    "effects_of_run",
    "effects_sent_again",
    "findings_for_run",
    "fork_kept",
    "gate_get",
    "gate_latest",
    "gate_queue",
    "gates_of_run",
    "incident_groups",
    "incident_runs",
    "ledger_export",
    "load_steps",
    "mailbox_of_run",
    "notifications_of_run",
    "notifications_page",
    "pause_held",
    "pauses_list",
    "question_of",
    "questions_timed_out",
    "retention_mark",
    "run_archive",
    "run_archives",
    "run_children",
    "run_detail",
    "run_executions",
    "run_failures",
    "run_progress",
    "run_status",
    "run_status_counts",
    "run_titles",
    "runs_by_ids",
    "runs_due_to_wake",
    "runs_filtered",
    "runs_lost_in_queue",
    "runs_named",
    "runs_page",
    "runs_to_prune",
    "runs_with_expired_leases",
    "schedule_named",
    "schedule_runs",
    "schedules_list",
    "search_condition",
    "search_words",
    "settlement_detail",
    "settlement_evidence",
    "settlement_is_outdated",
    "settlement_queue",
    "settlement_queue_steps",
    "settlements_waiting",
    "step_chain",
    "step_of_run",
    "step_page",
    "step_waterfall",
    "steps_after",
    "steps_by_id",
    "steps_for_page",
    "stream_after",
    "stream_tail",
    "sweep_health",
    "tool_of_step",
    "webhook_subscriptions",
]
