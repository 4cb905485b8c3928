"""A run's mailbox as the run page shows it: the events sent to it, in the order they arrived."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from ledger.models import MailboxEvent, Reason, Run, RunStatus, Step

#: The most events the run page lists (the oldest first; a run's mailbox is rarely longer).
MAILBOX_SHOWN = 200


def mailbox_of_run(*, run_id: str, limit: int = MAILBOX_SHOWN) -> QuerySet[MailboxEvent]:
    """The run's events, oldest first: each with its name, payload, sender and the step that
    took it ("" while it waits)."""
    return MailboxEvent.objects.filter(run_id=run_id).order_by("pk")[:limit]


@dataclass(frozen=True)
class Question:
    """The question a run waits on (``ctx.ask``): its step, words, JSON Schema (None: any
    JSON), the role that may answer, and when it times out (None: never)."""

    run_id: str
    step_id: str
    question: str
    schema: Any
    role: str
    due: datetime | None


def question_of(*, run: Run) -> Question | None:
    """The question ``run`` waits on, or None when it waits on none."""
    if run.status != RunStatus.NEEDS_ATTENTION or run.reason != Reason.QUESTION:
        return None
    inputs = (
        Step.objects.filter(run_id=run.run_id, step_id=run.blocked_step_id)
        .values_list("inputs", flat=True)
        .first()
    )
    if not isinstance(inputs, dict):
        return None
    return Question(
        run_id=run.run_id,
        step_id=run.blocked_step_id,
        question=str(inputs.get("question", "")),
        schema=inputs.get("schema"),
        role=str(inputs.get("role", "operator")),
        due=run.wake_at,
    )


def questions_timed_out(*, now: datetime, limit: int = 100) -> list[str]:
    """Runs waiting on a question whose timeout passed unanswered."""
    rows = Run.objects.filter(
        status=RunStatus.NEEDS_ATTENTION, reason=Reason.QUESTION, wake_at__lte=now
    ).values_list("run_id", flat=True)[:limit]
    return list(rows)


#: The most LangGraph checkpoints the run page lists (the newest first).
CHECKPOINTS_SHOWN = 50


def graph_checkpoints_of_run(
    *, run_id: str, limit: int = CHECKPOINTS_SHOWN
) -> list[dict[str, Any]]:
    """The LangGraph checkpoints the run's graph wrote (``ledger.adapters.langgraph``), newest
    first: thread, namespace, id, parent, LangGraph's metadata (source, step) and how many
    pending writes each holds. Reads no checkpoint body."""
    from django.db.models import Count, OuterRef, Subquery

    from ledger.models import GraphCheckpoint, GraphWrite

    pending = (
        GraphWrite.objects.filter(
            thread_id=OuterRef("thread_id"),
            checkpoint_ns=OuterRef("checkpoint_ns"),
            checkpoint_id=OuterRef("checkpoint_id"),
        )
        .values("checkpoint_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    rows = (
        GraphCheckpoint.objects.filter(run_id=run_id)
        .annotate(writes=Subquery(pending))
        .order_by("-checkpoint_id")
        .values(
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "parent_checkpoint_id",
            "metadata",
            "created_at",
            "writes",
        )[:limit]
    )
    return [
        {
            **row,
            "source": (row["metadata"] or {}).get("source", ""),
            "step": (row["metadata"] or {}).get("step"),
            "writes": row["writes"] or 0,
        }
        for row in rows
    ]
