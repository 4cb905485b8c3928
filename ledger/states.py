"""The states a run and a step can be in, and the kinds of step: plain enumerations that the
engine and the author's API use without the tables (``ledger.models`` re-exports them).

Importing this module needs no Django settings and no app registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import TextChoices


class RunStatus(TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    NEEDS_ATTENTION = "needs_attention"
    #: Held by an operator's pause (of a tool, an agent or the run): costs no resume budget;
    #: lifting the pause queues it again.
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Reason(TextChoices):
    NONE = "", "—"
    RECONCILIATION = "reconciliation"
    STALE = "stale"
    DIVERGENCE = "divergence"
    BUDGET = "budget"
    AGENT_MISSING = "agent_missing"
    APPROVAL = "approval"
    QUESTION = "question"  # ctx.ask: the run waits for a person's answer
    DEADLINE = "deadline"  # a failed run stopped by its deadline


#: The reasons a run needs attention (``deadline`` is a failed run's).
ATTENTION_REASONS = tuple(r for r in Reason.values if r and r != Reason.DEADLINE)


class StepStatus(TextChoices):
    PENDING = "pending"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABANDONED = "abandoned"


class StepKind(TextChoices):
    PURE = "pure"
    READ = "read"
    MODEL = "model"
    EFFECT = "effect"
    CLOCK = "clock"


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
FINAL_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
#: Stopped runs: a person may resume them (after which a worker picks them up). A paused run is
#: not among them: lifting its pause queues it (``ledger.transitions.pause_lift``).
STOPPED_STATUSES = (RunStatus.NEEDS_ATTENTION, RunStatus.FAILED)


@dataclass
class StepRow:
    """A ledger row as the engine sees it (results decoded)."""

    pk: int
    step_id: str
    input_hash: str
    status: str
    result: Any
    next_step_id: str | None
    attempt: int
    effect_key: str | None
    kind: str
    tool: str
    seq: int
    errors: list[Any] = field(default_factory=list)
    expires_at: datetime | None = None
    settled_by: str = ""
    #: UTF-8 bytes of the result's canonical JSON, when the execution that wrote it knows them
    #: (``ctx.history_bytes`` counts them without encoding the result again).
    size: int | None = None


class PauseScope(TextChoices):
    TOOL = "tool"  # every step of the tool, in every agent
    AGENT = "agent"  # every run of the agent
    RUN = "run"  # one run


class ExecutionEnding(TextChoices):
    """How one execution of a run (claim to end) ended."""

    RUNNING = "running"  # no end recorded yet
    FINISHED = "finished"  # the run succeeded (or continued as a new run)
    NEEDS_ATTENTION = "needs_attention", "stopped for a person"
    PAUSED = "paused"  # held by a pause
    FAILED = "failed"
    RELEASED = "released", "released to wait"  # a retry's back-off: the run waits, re-queued
    HANDED_BACK = "handed_back", "handed back"  # a stopping worker returned it before a step
    LEASE_LOST = "lease_lost", "lease lost"  # the worker found its lease taken and stopped
    CRASHED = "crashed"  # found by the sweep: the worker stopped renewing its lease
    CANCELLED = "cancelled", "cancelled"  # its run was cancelled (the error says by whom, why)
