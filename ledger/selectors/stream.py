"""A run's stream: the events its agent emitted (``ctx.emit``), in the order they were
appended."""

from __future__ import annotations

from ledger.models import Run, StreamEvent


def stream_after(*, run_id: str, after: int = 0, limit: int = 100) -> list[StreamEvent]:
    """The run's events with an id above ``after`` (the last one a client saw), oldest first,
    at most ``limit``."""
    rows = StreamEvent.objects.filter(run_id=run_id, id__gt=after).order_by("id")
    return list(rows[:limit])


def stream_tail(*, run_id: str, limit: int = 100) -> tuple[list[StreamEvent], int]:
    """The run's last ``limit`` events, oldest first, and how many it has in all."""
    rows = StreamEvent.objects.filter(run_id=run_id)
    last = list(rows.order_by("-id")[:limit])
    total = len(last) if len(last) < limit else rows.count()
    return last[::-1], total


def run_status(*, run_id: str) -> str | None:
    """The run's status now (None: no such run)."""
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
