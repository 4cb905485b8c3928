"""What retention reads: finished runs whose step rows can leave the table, an archive."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from ledger.models import FINAL_STATUSES, RetentionMark, Run, RunArchive, Step


def runs_to_prune(
    *, finished_before: datetime, limit: int, after: tuple[datetime, str] | None = None
) -> list[Run]:
    """Finished runs (succeeded, failed, cancelled) that finished before the cutoff and still
    have step rows that no settlement points at, oldest first (``finished_at``, ``run_id``);
    ``after`` continues past the last one of a previous page."""
    deletable = Step.objects.filter(run=OuterRef("pk"), settlements__isnull=True)
    runs = Run.objects.filter(status__in=FINAL_STATUSES, finished_at__lt=finished_before)
    if after is not None:
        at, run_id = after
        runs = runs.filter(Q(finished_at__gt=at) | Q(finished_at=at, run_id__gt=run_id))
    return list(runs.filter(Exists(deletable)).order_by("finished_at", "run_id")[:limit])


def run_archive(*, run_id: str) -> RunArchive | None:
    return RunArchive.objects.filter(pk=run_id).first()


def run_archives(*, run_ids: list[str]) -> dict[str, RunArchive]:
    return {a.run_id: a for a in RunArchive.objects.filter(pk__in=run_ids)}


def retention_mark() -> tuple[datetime, str] | None:
    """How far retention's walk got: every finished run up to this (finished_at, run_id) done."""
    mark = RetentionMark.objects.filter(pk=1).first()
    return (mark.finished_at, mark.run_id) if mark else None
