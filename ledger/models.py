"""The ledger's tables. ``Step`` is the seed's ``run_step`` row; ``Run`` is its parent.

Every write to these tables goes through ``ledger.transitions`` (hand-written SQL on the engine's
hot path);
the ORM serves migrations, the admin and the pages.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models

from ledger.states import ACTIVE_STATUSES as ACTIVE_STATUSES
from ledger.states import FINAL_STATUSES as FINAL_STATUSES
from ledger.states import STOPPED_STATUSES as STOPPED_STATUSES
from ledger.states import ExecutionEnding, PauseScope, Reason, RunStatus, StepKind, StepStatus


def new_run_id() -> str:
    return "run_" + secrets.token_hex(10)


class Run(models.Model):
    run_id = models.CharField(primary_key=True, max_length=64, default=new_run_id)
    agent = models.CharField(max_length=200, db_index=True)
    #: Who may see and act on the run (``ledger.teams``): its start's, its agent's, or the default.
    team = models.CharField(max_length=63, default="default", db_default="default")
    inputs = models.JSONField(default=dict)
    # One line an operator recognises, and searchable key/value labels: both made from the
    # inputs by the agent's declaration when the run starts (``registry.agent(title=, labels=)``).
    title = models.CharField(max_length=200, blank=True, default="")
    labels = models.JSONField(default=dict, blank=True)
    # The words of the run's effect steps and failed steps (id, effect key, error head) for the
    # list's word search: appended by triggers on ledger_step to RunSearchDelta and folded in
    # here by the sweep on PostgreSQL (migration 0018); empty elsewhere.
    search_steps = models.TextField(
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text="Kept by triggers: ids, effect keys and errors of the run's effect "
        "and failed steps, for the word search.",
    )
    # The application's key for this start (``ledger.api.start_run(idempotency_key=…)``, the
    # HTTP API's ``Idempotency-Key``): a repeat with the same key is the same run.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    reason = models.CharField(max_length=20, choices=Reason.choices, default="", blank=True)
    blocked_step_id = models.CharField(max_length=255, blank=True, default="")
    detail = models.TextField(blank=True, default="", help_text="Why the run stopped, in words.")
    # The cause of a stop, for the incidents page's grouping: the step it stopped at (a blocked
    # run's ``blocked_step_id``, a failed run's failing step when known) and the normalised
    # error (``ledger.signatures``), written by the transition that blocked or failed the run.
    cause_step = models.CharField(max_length=255, blank=True, default="", db_default="")
    signature = models.CharField(max_length=200, blank=True, default="", db_default="")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    # What the recorded path depended on (the determinism record).
    plan_version = models.CharField(max_length=100, blank=True, default="")
    tool_schema_hash = models.CharField(max_length=64, blank=True, default="")
    code_version = models.CharField(max_length=100, blank=True, default="")

    resume_count = models.PositiveIntegerField(default=0)
    max_resumes = models.PositiveIntegerField(default=10)
    executions = models.PositiveIntegerField(default=0, help_text="Times a worker ran the agent.")
    # The pause holding a paused run (lifting it queues the run), and whether the next
    # execution is free: an execution held by a pause costs no resume budget.
    pause = models.ForeignKey(
        "Pause", null=True, blank=True, on_delete=models.PROTECT, related_name="held_runs"
    )
    resume_free = models.BooleanField(default=False, db_default=False)

    # The worker lease: one executor per run, fenced by the token.
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_token = models.CharField(max_length=64, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The expiry of the last lease taken from a holder that may still be alive (a claim over
    # an expired lease, the sweep's re-queue, a cancel): until then plus the effect margin that
    # holder may still send an effect, so the next holder waits before touching its effects.
    prior_lease_expires_at = models.DateTimeField(null=True, blank=True)
    # A run released while a step's retry waits out its back-off: queued, and not claimable
    # before this time (``transitions.run_defer``); cleared by the execution it wakes.
    wake_at = models.DateTimeField(null=True, blank=True)
    # A run released while ``ctx.wait_for_event`` waits: the event's name. An event of that
    # name sent to the run queues it at once (``transitions.event_send``); "" otherwise.
    wait_event = models.CharField(max_length=200, blank=True, default="", db_default="")
    # Flow control (``ledger.pacing``): at most ``concurrency_limit`` runs with this key execute
    # at once across the fleet, enforced when a worker claims the run; "" is no key.
    concurrency_key = models.CharField(max_length=200, blank=True, default="", db_default="")
    concurrency_limit = models.PositiveIntegerField(default=0, db_default=0)
    # 0 to 9: a queued run of higher priority is claimed before older ones of lower priority,
    # aged so that none starves (``ledger.transitions.pacing``).
    priority = models.PositiveSmallIntegerField(default=0, db_default=0)
    # Past this time the run stops before its next step, failed with reason ``deadline``.
    deadline_at = models.DateTimeField(null=True, blank=True)
    # The schedule whose tick started the run (its ``schedule_id``; "" for a run started
    # otherwise): plain text, as the audit's run ids, so that a run holds no schedule in place.
    schedule = models.CharField(max_length=64, blank=True, default="", db_default="")

    # Bumped by every change of the run's state (claim, block, finish, resume, cancel, an
    # operator's action), not by heartbeats: an operator's form carries the version it showed,
    # and an action on a run that moved since is refused (optimistic concurrency).
    version = models.PositiveIntegerField(default=1, db_default=1)

    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    parent_kind = models.CharField(max_length=20, blank=True, default="")  # fork | continue
    forked_from_step_id = models.CharField(max_length=255, blank=True, default="")

    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    status_changed_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["status", "status_changed_at"], name="run_status_age"),
            models.Index(fields=["status", "reason", "status_changed_at"], name="run_reason_age"),
            models.Index(fields=["agent", "status_changed_at"], name="run_agent_age"),
            models.Index(fields=["created_at", "run_id"], name="run_created"),
            models.Index(fields=["team", "status", "status_changed_at"], name="run_team_status"),
            models.Index(fields=["status", "lease_expires_at"], name="run_lease_expiry"),
            # A keyed claim counts the key's running runs; a freed slot finds its queued ones.
            models.Index(
                fields=["concurrency_key", "status", "created_at"],
                name="run_concurrency",
                condition=~models.Q(concurrency_key=""),
            ),
            # The queued runs that may outrank another at its claim (empty unless used).
            models.Index(
                fields=["priority", "created_at"],
                name="run_priority_queued",
                condition=models.Q(status="queued", priority__gt=0),
            ),
            # The incidents page: one GROUP BY over the stopped runs, read from the index alone.
            models.Index(
                fields=["status", "status_changed_at"],
                include=["agent", "cause_step", "reason", "signature"],
                name="run_incident",
                condition=models.Q(status__in=("needs_attention", "failed")),
            ),
            # A schedule's runs, newest first (the runs list's ``?schedule=``, its last run).
            models.Index(
                fields=["schedule", "created_at"],
                name="run_schedule",
                condition=~models.Q(schedule=""),
            ),
            # Retention's walk over finished runs, oldest first (selectors.runs_to_prune).
            models.Index(
                fields=["finished_at", "run_id"],
                name="run_finished",
                condition=models.Q(status__in=FINAL_STATUSES),
            ),
        ]

    def __str__(self) -> str:
        return self.run_id


class Step(models.Model):
    # No index of its own: the unique (run_id, step_id) index and step_run_seq lead with run_id.
    run = models.ForeignKey(
        Run, on_delete=models.PROTECT, related_name="steps", db_column="run_id", db_index=False
    )
    step_id = models.CharField(max_length=255)
    input_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=StepStatus.choices)
    result = models.JSONField(null=True, blank=True)
    next_step_id = models.CharField(max_length=255, null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    effect_key = models.CharField(max_length=200, null=True, blank=True)
    updated_at = models.DateTimeField()

    kind = models.CharField(max_length=10, choices=StepKind.choices)
    tool = models.CharField(max_length=200, blank=True, default="")
    seq = models.PositiveIntegerField()
    inputs = models.JSONField(null=True, blank=True)
    inputs_truncated = models.BooleanField(default=False)
    error = models.TextField(blank=True, default="")
    errors = models.JSONField(default=list, blank=True, help_text="One entry per failed attempt.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    model_id = models.CharField(max_length=200, blank=True, default="")
    prompt_hash = models.CharField(max_length=64, blank=True, default="")
    # A model step's usage as its answer reports it, and its cost at the price table of the
    # time it was recorded (ledger.usage); NULL on other steps and where unknown. Plain integers
    # (never negative: ledger.usage drops such counts): a CHECK would make adding them scan.
    tokens_in = models.IntegerField(null=True, blank=True)
    tokens_out = models.IntegerField(null=True, blank=True)
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    settled_by = models.CharField(
        max_length=150, blank=True, default="", help_text="Set when a person settled this step."
    )
    # Bumped by every write to the row (all in ledger.transitions); the database default
    # covers the engine's raw INSERT.
    version = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step_id"], name="step_unique_per_run"),
        ]
        indexes = [
            models.Index(fields=["run", "seq"], name="step_run_seq"),
            # The transcripts' reads (migration 0021).
            models.Index(
                fields=["run", "seq"], name="step_run_model", condition=models.Q(kind="model")
            ),
            models.Index(
                fields=["status", "kind", "updated_at"],
                name="step_started_effects",
                condition=models.Q(status="started"),
            ),
            # Tokens and cost per agent over a window (migration 0030).
            models.Index(
                fields=["finished_at"],
                name="step_model_usage",
                condition=models.Q(kind="model", tokens_in__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.step_id}"


class Execution(models.Model):
    """One execution of a run: a worker's claim to its end (``Run.executions`` numbers them).

    Written by ``ledger.transitions`` only: one insert at the claim, one update at the end (or
    by the sweep, which finds a dead worker's execution ``crashed``). An execution still
    ``running`` behind a later one was taken over without the sweep (a claim over an expired
    lease): the selector shows it as crashed.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="execution_rows")
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200)
    host = models.CharField(max_length=200, blank=True, default="")
    pid = models.PositiveIntegerField(null=True, blank=True)
    task_id = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    ending = models.CharField(
        max_length=20, choices=ExecutionEnding.choices, default=ExecutionEnding.RUNNING
    )
    reason = models.CharField(max_length=20, blank=True, default="")
    step_id = models.CharField(max_length=255, blank=True, default="")
    replayed = models.PositiveIntegerField(default=0)
    executed = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="execution_once"),
        ]
        ordering = ["run", "number"]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.number} ({self.ending})"


class Pause(models.Model):
    """An operator's pause of a tool (in every agent), an agent, or one run.

    While active (``lifted_at`` null) a run reaching a step of the tool, or any step of the
    agent or run, stops ``paused`` (``Run.pause`` points here) without using its resume budget;
    lifting it queues every run it holds. At most one active pause per target.
    """

    scope = models.CharField(max_length=10, choices=PauseScope.choices)
    target = models.CharField(max_length=200)
    reason = models.TextField()
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField()
    lifted_by = models.CharField(max_length=150, blank=True, default="")
    lifted_at = models.DateTimeField(null=True, blank=True)
    lift_reason = models.TextField(blank=True, default="")
    requeued = models.PositiveIntegerField(default=0, help_text="Runs queued by the lift.")
    #: When the pause lifts itself (the sweep lifts it, audited as ``system:pause-expiry``).
    expires_at = models.DateTimeField(null=True, blank=True)
    #: The runs it holds now: annotated by ``selectors.pauses_list`` (not a column).
    held: int

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "target"],
                condition=models.Q(lifted_at__isnull=True),
                name="pause_active_once",
            ),
        ]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        state = "lifted" if self.lifted_at else "active"
        return f"pause of {self.scope} {self.target} ({state})"


# --- operator decisions -------------------------------------------------------------------


class SettlementOutcome(models.TextChoices):
    HAPPENED = "happened", "it happened"
    NOT_HAPPENED = "not_happened", "it did not happen"
    ABANDON = "abandon", "abandon"


class SettlementStatus(models.TextChoices):
    PROPOSED = "proposed"  # waiting for a second person
    APPLIED = "applied"  # approved (or approval off) and written to the ledger
    REJECTED = "rejected"  # refused by an approver, or withdrawn by its proposer
    SUPERSEDED = "superseded"  # the step changed before a decision: the proposal is moot


class Settlement(models.Model):
    """A person's answer to "did this interrupted effect happen?", and its approval.

    Written only by ``ledger.transitions``. ``step_version`` is the step's version when the
    proposal was made: an approval of a step that has changed since is refused.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="settlements")
    # The ledger row it settles; ``step_id`` is that row's step id (text), as everywhere else.
    step_row = models.ForeignKey(Step, on_delete=models.PROTECT, related_name="settlements")
    step_id = models.CharField(max_length=255)
    effect_key = models.CharField(max_length=200, blank=True, default="")
    outcome = models.CharField(max_length=20, choices=SettlementOutcome.choices)
    result = models.JSONField(null=True, blank=True)
    reason = models.TextField()
    status = models.CharField(
        max_length=20, choices=SettlementStatus.choices, default=SettlementStatus.PROPOSED
    )
    approval_required = models.BooleanField(default=True)
    step_version = models.PositiveIntegerField()
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    proposed_by_name = models.CharField(max_length=150)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decided_by_name = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["status", "created_at"], name="settlement_status_age"),
            models.Index(fields=["step_row", "status"], name="settlement_step_status"),
        ]

    def __str__(self) -> str:
        return f"settlement {self.pk}: {self.step_id} {self.outcome} ({self.status})"


class GateStatus(models.TextChoices):
    WAITING = "waiting"  # asked; not decided (or approved by one of two approvers)
    APPROVED = "approved"  # approved by enough people; not used yet
    USED = "used"  # its effect's intent was written under it (once)
    REJECTED = "rejected"
    VOID = "void"  # the arguments changed, or it expired, before it was used


#: A gate a person may still decide or an engine may still use.
OPEN_GATE_STATUSES = (GateStatus.WAITING, GateStatus.APPROVED)


class Gate(models.Model):
    """One approval gate: a person is asked to approve one step's exact arguments before the
    effect is sent (``@tool(approval=...)``).

    Written only by ``ledger.transitions.gates``. The approval binds the run, the step, the
    digest of the canonical arguments (``digest``, the step's input hash over
    ``arguments_text``) and ``expires_at``; the engine uses it once, in the transaction that
    writes the effect's intent. At most one open gate per step.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="gates")
    step_id = models.CharField(max_length=255)
    tool = models.CharField(max_length=200)
    arguments_text = models.TextField(help_text="The exact canonical JSON the tool receives.")
    digest = models.CharField(max_length=64)
    approvers_required = models.PositiveSmallIntegerField(default=1)
    on_reject = models.CharField(max_length=10, default="raise")
    status = models.CharField(max_length=20, choices=GateStatus.choices, default=GateStatus.WAITING)
    #: The names of the people who approved, in order (four eyes: two distinct names).
    approved_by = models.JSONField(default=list, blank=True)
    decided_by_name = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True, default="")
    #: Single-use links: the nonces of the signed links already used.
    links_used = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    void_reason = models.CharField(max_length=200, blank=True, default="")
    version = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step_id"],
                condition=models.Q(status__in=["waiting", "approved"]),
                name="gate_one_open_per_step",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "created_at"], name="gate_status_age"),
            models.Index(fields=["run", "step_id"], name="gate_run_step"),
        ]

    def __str__(self) -> str:
        return f"gate {self.pk}: {self.run_id}/{self.step_id} ({self.status})"


class AuditAction(models.TextChoices):
    SETTLEMENT_PROPOSE = "settlement_propose"
    SETTLEMENT_APPROVE = "settlement_approve"
    SETTLEMENT_REJECT = "settlement_reject"
    SETTLEMENT_APPLY = "settlement_apply"  # proposed and applied at once (approval off)
    RECONCILE_LOOKUP = "reconcile_lookup"
    RUN_START = "run_start"  # a run started by a person (a command)
    STALE_ACCEPT = "stale_accept"
    REEXECUTE_FROM = "reexecute_from"
    RUN_RESUME = "run_resume"
    RUN_RETRY = "run_retry"
    RUN_CANCEL = "run_cancel"
    RUN_FORK = "run_fork"
    RUN_CLEAN = "run_clean"  # a clean run replaces a stopped one (same inputs, empty ledger)
    STEP_ADMIN_EDIT = "step_admin_edit"
    RUN_ADMIN_EDIT = "run_admin_edit"
    PAUSE = "pause"  # an operator paused a tool, an agent or a run
    UNPAUSE = "unpause"  # a pause lifted: the runs it held queued again
    RUN_ARCHIVE = "run_archive"  # retention: a finished run's step rows moved to an archive
    WEBHOOK_SUBSCRIBE = "webhook_subscribe"  # an application subscribed a URL to run events
    WEBHOOK_UNSUBSCRIBE = "webhook_unsubscribe"
    GATE_APPROVE = "gate_approve"  # an approval gate approved (by one of its approvers)
    GATE_REJECT = "gate_reject"
    ALERT_ACK = "alert_ack"  # a person acknowledged an alert's incident (and is on its runs)
    RUN_TAKE = "run_take"  # a person said "on it" (or took a run over from someone else)
    RUN_RELEASE = "run_release"  # nobody is on it any more
    RUN_NOTE = "run_note"  # a note left on a run (the text is the event's reason)
    QUESTION_ANSWER = "question_answer"  # a person answered a run's ctx.ask

    SCHEDULE_ADD = "schedule_add"  # a schedule made (its ticks start runs)
    SCHEDULE_PAUSE = "schedule_pause"  # its ticks start nothing until resumed
    SCHEDULE_RESUME = "schedule_resume"
    SCHEDULE_REMOVE = "schedule_remove"
    TEAM_ROLE = "team_role"  # a person's role in one team set, changed or removed
    SSO_ROLES = "sso_roles"  # a person's roles replaced from the identity provider's groups


class AppendOnly(Exception):
    """An audit event was about to be changed or deleted."""


class AuditQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: object) -> int:
        raise AppendOnly("audit events are append-only: they are never updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit events are append-only: they are never deleted")


class AuditEvent(models.Model):
    """One human change: who, when, what, on which run and step, before, after, why.

    Append-only three times over: ``save()`` refuses an existing row, ``delete()`` and the
    queryset's ``update()``/``delete()`` refuse, and a database trigger (migration 0002)
    refuses UPDATE (and DELETE on PostgreSQL). ``run_id`` is plain text, not a foreign key, so
    that an audit row never holds anything else in place.
    """

    actor = models.CharField(max_length=150, db_index=True)
    at = models.DateTimeField(db_index=True)
    action = models.CharField(max_length=40, choices=AuditAction.choices, db_index=True)
    run_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    step_id = models.CharField(max_length=255, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    settlement = models.ForeignKey(
        Settlement, null=True, blank=True, on_delete=models.PROTECT, related_name="events"
    )

    objects = AuditQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["run_id", "at"], name="audit_run_at")]
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.run_id}"

    def save(self, *args: object, **kwargs: object) -> None:
        if not self._state.adding:
            raise AppendOnly("audit events are append-only: they are never updated")
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        raise AppendOnly("audit events are append-only: they are never deleted")


class Beacon(models.Model):
    """The last time a periodic duty ran (e.g. the lease sweep), so operators can see that
    recovery is alive: a dead beat means crashed runs wait forever."""

    name = models.CharField(primary_key=True, max_length=100)
    at = models.DateTimeField()
    detail = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%Y-%m-%d %H:%M:%S}"


# --- notifications (an outbox) ---------------------------------------------------------------


class NotificationKind(models.TextChoices):
    NEEDS_ATTENTION = "needs_attention", "a run needs a person"
    APPROVAL_WAITING = "approval_waiting", "a settlement waits for approval"
    REMINDER = "reminder", "still waiting"
    # Completion events to subscribed applications (``ledger.webhooks.EVENT_TYPES``).
    RUN_SUCCEEDED = "run.succeeded", "event: run succeeded"
    RUN_FAILED = "run.failed", "event: run failed"
    RUN_CANCELLED = "run.cancelled", "event: run cancelled"
    RUN_NEEDS_ATTENTION = "run.needs_attention", "event: run needs attention"
    GATE_WAITING = "gate_waiting", "an effect waits for approval"
    # Pages of alert rules (``ledger.transitions.alerts``): one row per receiver and change.
    ALERT_TRIGGER = "alert.trigger", "alert: triggered"
    ALERT_ACK = "alert.acknowledge", "alert: acknowledged"
    ALERT_RESOLVE = "alert.resolve", "alert: resolved"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # to send (first time, or again after a failure's back-off)
    SENDING = "sending"  # claimed by a deliverer until ``claimed_until``
    SENT = "sent"
    FAILED = "failed"  # gave up after RUNLEDGER_NOTIFY_MAX_ATTEMPTS


class WebhookSubscription(models.Model):
    """An application's URL that completion events of some runs are POSTed to, signed as
    Standard Webhooks with ``secret`` (``whsec_…``, shown once when subscribed).

    Exactly one of ``agent`` (every run of that agent) and ``run_id`` (one run, and the runs it
    continues as) is set; ``events`` lists the event types wanted. A removed subscription keeps
    its row (its deliveries on the Notifications page name it) and gets nothing more. Written
    only by ``ledger.transitions.events``.
    """

    url = models.CharField(max_length=2000)  # http(s), checked by ledger.transitions.events
    agent = models.CharField(max_length=200, blank=True, default="", db_index=True)
    run_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    #: For an agent's subscription: only that team's runs of the agent ("" every team's); made
    #: by a team's API token. A run's subscription is of the run's team.
    team = models.CharField(max_length=63, blank=True, default="", db_default="")
    events = models.JSONField(default=list)
    secret = models.CharField(max_length=200)
    description = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=150, blank=True, default="")
    removed_at = models.DateTimeField(null=True, blank=True)
    removed_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(agent="") & ~models.Q(run_id=""))
                | (~models.Q(agent="") & models.Q(run_id="")),
                name="webhook_subscription_one_scope",
            ),
        ]

    def __str__(self) -> str:
        scope = f"agent {self.agent}" if self.agent else f"run {self.run_id}"
        return f"subscription {self.pk}: {scope} → {self.url}"

    @property
    def scope(self) -> str:
        return f"agent {self.agent}" if self.agent else f"run {self.run_id}"


class Notification(models.Model):
    """One message for one channel about one event, written in the transaction of the event.

    ``(event_key, channel)`` is unique: an event is queued once per channel however often the
    code that records it runs. ``idempotency_key`` goes to the receiver with every attempt (the
    webhook's ``Idempotency-Key`` header, the email's Message-ID), so a retry after a deliverer
    died mid-send is recognisable as the same message. Written only by ``ledger.transitions``.
    """

    event_key = models.CharField(max_length=200)
    channel = models.CharField(max_length=50)
    kind = models.CharField(max_length=30, choices=NotificationKind.choices)
    run_id = models.CharField(max_length=64, db_index=True)
    settlement_id = models.BigIntegerField(null=True, blank=True)
    # For completion events: the subscription it goes to (its URL and secret).
    subscription = models.ForeignKey(
        WebhookSubscription,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="deliveries",
    )
    # For an alert's page: the incident it is about (its rows go out in order, per receiver).
    alert = models.ForeignKey(
        "Alert", null=True, blank=True, on_delete=models.PROTECT, related_name="deliveries"
    )
    # For reminders: the moment the waiting began (a run's status_changed_at, a proposal's
    # created_at), so a wait is reminded of once.
    waiting_since = models.DateTimeField(null=True, blank=True)
    subject = models.CharField(max_length=300)
    payload = models.JSONField(default=dict)
    idempotency_key = models.CharField(max_length=64, unique=True)
    status = models.CharField(
        max_length=20, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True)
    claim_token = models.CharField(max_length=64, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event_key", "channel"], name="notification_once"),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="notification_due"),
            models.Index(fields=["created_at", "id"], name="notification_created"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.run_id} → {self.channel} ({self.status})"


class AlertStatus(models.TextChoices):
    TRIGGERED = "triggered"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


class Alert(models.Model):
    """One incident of an alert rule in one scope (an agent, a tool, or ``""`` for all): opened
    when the rule's condition holds, acknowledged by a person, resolved when the condition
    clears. At most one open (not resolved) incident per (rule, scope): however many runs the
    condition covers, and however often it is evaluated, there is one incident and one page.

    ``dedup_key`` is what the receivers group on (PagerDuty's ``dedup_key``, Opsgenie's
    ``alias``): stable per (rule, scope), so a receiver folds a repeated trigger into the open
    incident. Written only by ``ledger.transitions.alerts``; its pages are ``Notification``
    rows written in the same transaction as each change.
    """

    rule = models.CharField(max_length=100)
    scope = models.CharField(max_length=200, blank=True, default="")
    dedup_key = models.CharField(max_length=300)
    status = models.CharField(
        max_length=20, choices=AlertStatus.choices, default=AlertStatus.TRIGGERED
    )
    summary = models.CharField(max_length=300)
    #: What the last evaluation found: the count, the value, a sample of the runs affected.
    detail = models.JSONField(default=dict, blank=True)
    opened_at = models.DateTimeField()
    seen_at = models.DateTimeField(help_text="The last evaluation that found the condition.")
    acked_by = models.CharField(max_length=150, blank=True, default="")
    acked_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "scope"],
                condition=~models.Q(status="resolved"),
                name="alert_open_once",
            ),
        ]
        indexes = [models.Index(fields=["status", "opened_at"], name="alert_status_age")]
        ordering = ["-opened_at", "-id"]

    def __str__(self) -> str:
        return f"{self.rule}[{self.scope or 'all'}] {self.status}"

    @property
    def run_ids(self) -> list[str]:
        return [str(r) for r in (self.detail or {}).get("run_ids", [])]


class Difference(models.TextChoices):
    MISSING_DOWNSTREAM = (
        "missing_downstream",
        "the ledger says done; the downstream system has nothing",
    )
    UNEXPECTED_DOWNSTREAM = (
        "unexpected_downstream",
        "the ledger says failed or abandoned; the downstream system has it",
    )
    RESULT_DIFFERS = "result_differs", "the ledger's result differs from the downstream system's"
    UNKNOWN_TO_LEDGER = "unknown_to_ledger", "the downstream system holds a key the ledger lacks"


class EffectAudit(models.Model):
    """One pass of the effect audit (``ledger.processes.effect_audit``): the ledger's effects
    compared
    with what the downstream systems hold. Kept, with its findings, and resumable from
    ``cursor`` (the last step row asked about). Writes nothing to runs or steps."""

    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    by = models.CharField(max_length=150, blank=True, default="")
    agent = models.CharField(max_length=100, blank=True, default="")
    since = models.DateTimeField(null=True, blank=True)
    cursor = models.BigIntegerField(default=0)
    checked = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    unanswered = models.PositiveIntegerField(default=0)
    listed = models.PositiveIntegerField(default=0)
    finished = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"effect audit {self.pk} ({self.checked} checked)"


class EffectAuditFinding(models.Model):
    audit = models.ForeignKey(EffectAudit, on_delete=models.CASCADE, related_name="findings")
    difference = models.CharField(max_length=30, choices=Difference.choices)
    run_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    step_id = models.CharField(max_length=255, blank=True, default="")
    tool = models.CharField(max_length=200, blank=True, default="")
    effect_key = models.CharField(max_length=200)
    ledger_status = models.CharField(max_length=20, blank=True, default="")
    ledger_result = models.JSONField(null=True, blank=True)
    downstream = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.difference} {self.effect_key}"


class RunArchive(models.Model):
    """Where retention put a finished run's step rows (``manage.py prune_runs``).

    Written by ``ledger.transitions.retention`` only, before the first step row is deleted:
    the archive file is complete and its digest recorded first, so a prune interrupted at any
    point leaves every row either in the table, in the file, or both. ``run_version`` is the
    run's version when it was archived; a run that changed since (an operator's retry) has no
    rows deleted. Steps that a settlement points at stay in the table (they are the audit's
    evidence); ``kept`` counts them.
    """

    run = models.OneToOneField(
        Run, primary_key=True, on_delete=models.PROTECT, related_name="archive", db_column="run_id"
    )
    location = models.CharField(max_length=1000)
    sha256 = models.CharField(max_length=64)
    steps = models.PositiveIntegerField()
    deleted = models.PositiveIntegerField(default=0)
    kept = models.PositiveIntegerField(default=0)
    run_version = models.PositiveIntegerField()
    archived_at = models.DateTimeField()
    archived_by = models.CharField(max_length=150)

    def __str__(self) -> str:
        return f"{self.run_id} -> {self.location}"


class RetentionMark(models.Model):
    """How far retention's walk over finished runs (oldest first) got with every run before it
    done: the ``finished_at`` and ``run_id`` of the last run of the last batch it completed
    without leaving a run behind. Beat's ticks start there instead of passing over every run
    pruned before (``ledger.processes.retention``). One row.

    Sound because a run that becomes finished again (a retry, a resume, an admin's edit) gets a
    new ``finished_at``, later than any mark set before."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    finished_at = models.DateTimeField()
    run_id = models.CharField(max_length=64)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"retention done up to {self.finished_at:%Y-%m-%d %H:%M:%S} {self.run_id}"


class ClaudeSessionEntry(models.Model):
    """One line of a Claude Agent SDK session transcript, kept beside the run's ledger
    (``ledger.adapters.claude_agent_sdk.LedgerSessionStore``): the transcript says what was
    said, the ledger what was done, and both live off the node that ran the session.

    Entries are the SDK's opaque JSON objects in append order (``id``); one with a ``uuid`` is
    stored once per key (the SDK retries a batch). ``subpath`` is "" for the main transcript,
    else a subagent's (``subagents/agent-1``). ``run`` binds a session to the run that wrote it
    (empty for a store used outside a run); deleting the run deletes its transcript.
    """

    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.CASCADE, related_name="claude_entries"
    )
    project_key = models.CharField(max_length=255)
    session_id = models.CharField(max_length=255)
    subpath = models.CharField(max_length=255, blank=True, default="")
    uuid = models.CharField(max_length=64, blank=True, default="")
    entry = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["project_key", "session_id", "subpath", "id"], name="claude_key"),
            models.Index(fields=["run", "id"], name="claude_run"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["project_key", "session_id", "subpath", "uuid"],
                condition=~models.Q(uuid=""),
                name="claude_entry_once",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.subpath or 'main'} #{self.pk}"


class RunStatusCount(models.Model):
    """Runs per (status, reason), folded from :class:`RunStatusDelta` rows.

    Kept by the database, not by Python: triggers on ``ledger_run`` (migration
    ``0016_status_counts``) write a delta for every inserted or deleted run and every update
    that changes a run's status or reason, in the same transaction, whatever wrote it (a
    transition, a bulk action, COPY, retention). ``selectors.run_status_counts`` sums these
    rows and the unfolded deltas, so the counts are exact and cost the same at any table size;
    ``transitions.counts.fold_status_counts`` (on the sweep's schedule) folds deltas in here.
    """

    status = models.CharField(max_length=20)
    reason = models.CharField(max_length=20, blank=True, default="")
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["status", "reason"], name="run_status_count_key")
        ]

    def __str__(self) -> str:
        return f"{self.status}/{self.reason or '-'}: {self.n}"


class RunStatusDelta(models.Model):
    """One change to the runs per (status, reason): appended by ``ledger_run``'s triggers
    (inserts never wait on each other, so concurrent transitions do not queue on a counter
    row), folded into :class:`RunStatusCount`."""

    status = models.CharField(max_length=20)
    reason = models.CharField(max_length=20, blank=True, default="")
    n = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.status}/{self.reason or '-'}: {self.n:+d}"


class RunSearchDelta(models.Model):
    """The words of one effect or failed step (id, effect key, error head), appended by
    ``ledger_step``'s triggers (migration ``0018_run_search``) and moved into
    :attr:`Run.search_steps` by ``transitions.search.fold_search_words`` on the sweep's
    schedule: an INSERT, so that a step's write never upgrades its lock on the run row."""

    run_id = models.CharField(max_length=64, db_index=True)
    words = models.TextField()

    def __str__(self) -> str:
        return f"{self.run_id}: {self.words[:60]}"


# --- trends (an hourly rollup kept by the database) -------------------------------------------


class RunTrendHour(models.Model):
    """Runs that entered a status in one hour (UTC), per agent, with the duration bucket of the
    runs that finished (``bucket`` -1 for a status that is not final).

    Kept by the database like :class:`RunStatusCount`: triggers on ``ledger_run`` (migration
    ``0019_run_trends``) append a :class:`RunTrendDelta` for every inserted run and every status
    change, in the writing transaction; ``transitions.trends.fold_trends`` (on the sweep's
    schedule) folds them in here. ``selectors.trends`` reads these two tables only, never
    ``ledger_run``: the Trends page costs the same at any table size. The duration is
    ``finished_at - created_at`` (what an application waits for its run); the bucket edges are
    ``ledger.selectors.trends.BUCKET_EDGES``.
    """

    hour = models.DateTimeField()
    #: The runs' team (migration ``0033_trend_team``): a team member's Trends read their rows.
    team = models.CharField(max_length=63, default="default", db_default="default")
    agent = models.CharField(max_length=200)
    status = models.CharField(max_length=20)
    bucket = models.SmallIntegerField(default=-1)
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "team", "agent", "status", "bucket"], name="run_trend_team_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.agent} {self.status}[{self.bucket}]: {self.n}"


class RunTrendDelta(models.Model):
    """Runs that entered a status, not folded into :class:`RunTrendHour` yet (appended by
    ``ledger_run``'s triggers: inserts never wait on each other)."""

    hour = models.DateTimeField()
    team = models.CharField(max_length=63, default="default", db_default="default")
    agent = models.CharField(max_length=200)
    status = models.CharField(max_length=20)
    bucket = models.SmallIntegerField(default=-1)
    n = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.agent} {self.status}[{self.bucket}]: {self.n:+d}"


# --- handover (who is on a run) ---------------------------------------------------------------


class Handover(models.Model):
    """The person on a run ("on it"): at most one a run; no row is nobody.

    Written only by ``ledger.transitions.handover`` (take, take over, release), each with its
    audit row in the same transaction; a run's notes are audit rows (``run_note``), append-only
    like every other. ``run_id`` is plain text, not a foreign key, like the audit's: taking a
    run holds nothing else in place.
    """

    run_id = models.CharField(primary_key=True, max_length=64)
    taken_by = models.CharField(max_length=150, db_index=True)
    taken_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.taken_by} on {self.run_id}"


class StreamEvent(models.Model):
    """One event an agent emitted (``ctx.emit(kind, data)``): the run's stream, in ``id`` order.

    Written only by ``ledger.transitions.stream`` (fenced by the run's lease token). An event is
    keyed by the emitting call's step id, as steps are: a re-execution after a crash walks the
    same path, makes the same ``emit`` with the same step id and finds its row already there, so
    the event is appended once whatever the number of executions. ``id`` is the SSE event id a
    client resumes from (``Last-Event-ID``).
    """

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="stream_events")
    step_id = models.CharField(max_length=255)
    kind = models.CharField(max_length=100)
    data = models.JSONField(null=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step_id"], name="stream_event_once"),
        ]
        indexes = [models.Index(fields=["run", "id"], name="stream_run_id")]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.id} {self.kind}"


# --- the mailbox (events sent to a run) -------------------------------------------------------


class MailboxEvent(models.Model):
    """One event sent to a run (``ledger.api.send_event``, ``POST /api/v1/runs/{id}/events``).

    Idempotent by (run, event_id); kept in the order it arrived (``pk``). ``ctx.wait_for_event``
    takes the oldest unconsumed event of its name in the transaction that records its step, so
    an event is consumed exactly once (``consumed_step_id`` names the step). Written only by
    ``ledger.transitions.mailbox``.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="mailbox")
    event_id = models.CharField(max_length=200)
    name = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    payload_hash = models.CharField(max_length=64)
    sender = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField()
    consumed_step_id = models.CharField(max_length=255, blank=True, default="")
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "event_id"], name="mailbox_run_event_id"),
        ]
        indexes = [models.Index(fields=["run", "name", "id"], name="mailbox_run_name")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.name} ({self.event_id})"


# --- rate limits (ledger.ratelimits) ----------------------------------------------------------


class RateLimit(models.Model):
    """One limit key's slots (``tool:charge``, ``model:claude-haiku-4-5``, its ``#tokens``):
    the next free slot, taken by every call with one statement (``transitions.ratelimits``).

    ``next_at`` is the generic cell rate algorithm's "theoretical arrival time": a call takes
    the slot ``max(next_at, now, blocked_until)`` and moves ``next_at`` one interval past it
    (a model's tokens: the tokens used times the per-token interval, after the call). A
    provider's 429 sets ``blocked_until``: no slot before it, for every worker."""

    key = models.CharField(primary_key=True, max_length=210)
    next_at = models.DateTimeField()
    blocked_until = models.DateTimeField(null=True, blank=True)
    rate = models.CharField(max_length=40, default="")  # as configured when last taken
    interval = models.FloatField(default=0.0)  # seconds between slots (per token for #tokens)
    taken = models.BigIntegerField(default=0)  # slots taken (calls let through, in time)
    waited = models.BigIntegerField(default=0)  # of them, the ones that had to wait
    blocked = models.BigIntegerField(default=0)  # 429s with retry-after seen
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key} {self.rate}"


class RateHold(models.Model):
    """A slot taken by a run that was released to wait for it (a wait longer than
    RUNLEDGER_RATE_LIMIT_HOLD_SECONDS): the run's execution that reaches the step again uses
    it, keeping its place in line, instead of taking a new one at the back."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="rate_holds")
    step_id = models.CharField(max_length=255)
    key = models.CharField(max_length=210)
    slot_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step_id", "key"], name="rate_hold_once"),
        ]
        indexes = [models.Index(fields=["key", "slot_at"], name="rate_hold_key")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.step_id} {self.key} at {self.slot_at}"


# --- schedules (runs started by a clock) ------------------------------------------------------


def new_schedule_id() -> str:
    return "sch_" + secrets.token_hex(8)


class Schedule(models.Model):
    """Runs of ``agent`` with ``inputs`` started at each tick of a cron expression (in
    ``timezone``) or of an interval (``ledger.schedules``).

    ``next_at`` is the next tick due; the periodic pass (``ledger.processes.schedules``) starts
    each due tick's run with the tick's idempotency key, then moves ``next_at`` on with a
    compare-and-set, so that two passes at once, or a pass killed between the two, start one
    run per tick. ``missed`` says what ticks missed while no pass ran start (skip, once, each).
    A paused schedule's ticks start nothing (resumed, it ticks from then on); a removed one
    keeps its row (its runs name it) and never ticks again. Written only by
    ``ledger.transitions.schedules``.
    """

    schedule_id = models.CharField(primary_key=True, max_length=64, default=new_schedule_id)
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=200, blank=True, default="")
    agent = models.CharField(max_length=200)
    #: The team of the runs it starts (``ledger.teams``): who may see and manage it.
    team = models.CharField(max_length=63, default="default", db_default="default")
    inputs = models.JSONField(default=dict)
    cron = models.CharField(max_length=200, blank=True, default="")
    interval_seconds = models.PositiveIntegerField(default=0)
    timezone = models.CharField(max_length=64, default="UTC")
    missed = models.CharField(max_length=10, default="skip")
    # The start options of each tick's run (None: the run's defaults, the agent's declaration).
    priority = models.PositiveSmallIntegerField(null=True, blank=True)
    concurrency_key = models.CharField(max_length=200, blank=True, default="")
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    deadline_seconds = models.FloatField(null=True, blank=True)

    next_at = models.DateTimeField()
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, blank=True, default="")
    last_tick_at = models.DateTimeField(null=True, blank=True)
    last_run_id = models.CharField(max_length=64, blank=True, default="")
    # What the last pass could not start (an agent no longer registered, inputs it refuses).
    last_error = models.TextField(blank=True, default="")
    # Due ticks that started no run (missed under ``skip``/``once``, beyond ``each``'s bound).
    ticks_skipped = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField()
    created_by = models.CharField(max_length=150)
    removed_at = models.DateTimeField(null=True, blank=True)
    removed_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["name"], condition=models.Q(removed_at__isnull=True), name="schedule_name"
            ),
        ]
        indexes = [
            # The pass's question: which live, running schedules are due.
            models.Index(
                fields=["next_at"],
                name="schedule_due",
                condition=models.Q(removed_at__isnull=True, paused_at__isnull=True),
            ),
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"schedule {self.name} ({self.schedule_id})"

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def removed(self) -> bool:
        return self.removed_at is not None


# --- LangGraph checkpoints (ledger.adapters.langgraph.RunledgerSaver) --------------------------


class GraphCheckpoint(models.Model):
    """One LangGraph checkpoint (``RunledgerSaver.put``): the checkpoint without its channel
    values (those are ``GraphBlob`` rows, one per channel version, as LangGraph's PostgreSQL
    saver keeps them, so an unchanged channel is not stored again), its metadata and parent.

    Keyed by (thread_id, checkpoint_ns, checkpoint_id) as LangGraph addresses them. ``run``
    binds the thread to the run whose graph wrote it (empty for a saver used outside a run);
    deleting the run deletes its checkpoints. Written only by ``ledger.transitions.checkpoints``.
    ``metadata`` is the checkpoint's metadata as JSON, for the run page and ``list(filter=)``.
    """

    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.CASCADE, related_name="graph_checkpoints"
    )
    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    parent_checkpoint_id = models.CharField(max_length=64, blank=True, default="")
    type = models.CharField(max_length=32)
    checkpoint = models.BinaryField()
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread_id", "checkpoint_ns", "checkpoint_id"], name="graph_checkpoint_key"
            ),
        ]
        indexes = [models.Index(fields=["run", "id"], name="graph_checkpoint_run")]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns or '-'}/{self.checkpoint_id}"


class GraphBlob(models.Model):
    """One channel's value at one version of a LangGraph thread (``RunledgerSaver.put``)."""

    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    channel = models.CharField(max_length=255)
    version = models.CharField(max_length=64)
    type = models.CharField(max_length=32)
    blob = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread_id", "checkpoint_ns", "channel", "version"], name="graph_blob_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.channel}@{self.version}"


class GraphWrite(models.Model):
    """One pending write of a LangGraph task (``RunledgerSaver.put_writes``): what a finished
    task of a superstep wrote, so a resumed superstep does not run that task again."""

    thread_id = models.CharField(max_length=255)
    checkpoint_ns = models.CharField(max_length=255, blank=True, default="")
    checkpoint_id = models.CharField(max_length=64)
    task_id = models.CharField(max_length=255)
    task_path = models.CharField(max_length=255, blank=True, default="")
    idx = models.IntegerField()
    channel = models.CharField(max_length=255)
    type = models.CharField(max_length=32)
    blob = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                name="graph_write_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_id} {self.task_id}[{self.idx}] {self.channel}"
