"""What retention reads: finished runs whose step rows can leave the table, an archive."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef

from ledger.models import FINAL_STATUSES, Run, RunArchive, Step


def runs_to_prune(*, finished_before: datetime, limit: int) -> list[Run]:
    """Finished runs (succeeded, failed, cancelled) that finished before the cutoff and still
    have step rows that no settlement points at, oldest first, with their archive if any."""
    deletable = Step.objects.filter(run=OuterRef("pk"), settlements__isnull=True)
    return list(
        Run.objects.filter(status__in=FINAL_STATUSES, finished_at__lt=finished_before)
        .filter(Exists(deletable))
        .order_by("finished_at", "run_id")[:limit]
    )


def run_archive(*, run_id: str) -> RunArchive | None:
    return RunArchive.objects.filter(pk=run_id).first()
