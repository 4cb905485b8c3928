"""The ledger's tables. ``Step`` is the seed's ``run_step`` row; ``Run`` is its parent.

Engine writes to these tables go through ``ledger.store`` (hand-written SQL on the hot path);
the ORM serves migrations, the admin and the pages.
"""

from __future__ import annotations

import secrets

from django.db import models


def new_run_id() -> str:
    return "run_" + secrets.token_hex(10)


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    NEEDS_ATTENTION = "needs_attention"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Reason(models.TextChoices):
    NONE = "", "—"
    RECONCILIATION = "reconciliation"
    STALE = "stale"
    DIVERGENCE = "divergence"
    BUDGET = "budget"
    AGENT_MISSING = "agent_missing"


class StepStatus(models.TextChoices):
    PENDING = "pending"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABANDONED = "abandoned"


class StepKind(models.TextChoices):
    PURE = "pure"
    READ = "read"
    MODEL = "model"
    EFFECT = "effect"
    CLOCK = "clock"


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
FINAL_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class Run(models.Model):
    run_id = models.CharField(primary_key=True, max_length=64, default=new_run_id)
    agent = models.CharField(max_length=200, db_index=True)
    inputs = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    reason = models.CharField(max_length=20, choices=Reason.choices, default="", blank=True)
    blocked_step_id = models.CharField(max_length=255, blank=True, default="")
    detail = models.TextField(blank=True, default="", help_text="Why the run stopped, in words.")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    # What the recorded path depended on (the determinism record).
    plan_version = models.CharField(max_length=100, blank=True, default="")
    tool_schema_hash = models.CharField(max_length=64, blank=True, default="")
    code_version = models.CharField(max_length=100, blank=True, default="")

    resume_count = models.PositiveIntegerField(default=0)
    max_resumes = models.PositiveIntegerField(default=10)
    executions = models.PositiveIntegerField(default=0, help_text="Times a worker ran the agent.")

    # The worker lease: one executor per run, fenced by the token.
    lease_owner = models.CharField(max_length=200, blank=True, default="")
    lease_token = models.CharField(max_length=64, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

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
            models.Index(fields=["status", "lease_expires_at"], name="run_lease_expiry"),
        ]

    def __str__(self) -> str:
        return self.run_id


class Step(models.Model):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="steps", db_column="run_id")
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
    settled_by = models.CharField(
        max_length=150, blank=True, default="", help_text="Set when a person settled this step."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step_id"], name="step_unique_per_run"),
        ]
        indexes = [
            models.Index(fields=["run", "seq"], name="step_run_seq"),
            models.Index(
                fields=["status", "kind", "updated_at"],
                name="step_started_effects",
                condition=models.Q(status="started"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.step_id}"
