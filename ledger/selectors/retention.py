"""What retention reads: finished runs whose step rows can leave the table, an archive."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Exists, OuterRef, Q

from ledger.models import FINAL_STATUSES, RetentionMark, Run, RunArchive, Settlement, Step

#: The columns retention reads of a run (the rest, inputs and results, stays in the table).
PRUNE_FIELDS = ("run_id", "status", "version", "finished_at", "updated_at")


def runs_to_prune(
    *, finished_before: datetime, limit: int, after: tuple[datetime, str] | None = None
) -> list[Run]:
    """Finished runs (succeeded, failed, cancelled) that finished before the cutoff and still
    have step rows that no settlement points at, oldest first (``finished_at``, ``run_id``);
    ``after`` continues past the last one of a previous page.

    The plan walks the ``run_finished`` index from ``after`` in order and probes each run's
    steps by ``step_run_seq`` until it has ``limit`` (``NOT EXISTS`` a settlement, an anti-join
    the planner estimates well; the LEFT JOIN … IS NULL it replaced was estimated at 0.5 % of
    the steps, so the planner hashed the whole step table on every page: 200 ms a page at
    100,000 steps, growing with the table). ``finished_at >= at`` makes the page's start an
    index condition rather than a filter over the runs before it."""
    settled = Settlement.objects.filter(step_row=OuterRef("pk"))
    deletable = Step.objects.filter(run=OuterRef("pk")).filter(~Exists(settled))
    runs = Run.objects.filter(status__in=FINAL_STATUSES, finished_at__lt=finished_before)
    if after is not None:
        at, run_id = after
        runs = runs.filter(finished_at__gte=at).filter(
            Q(finished_at__gt=at) | Q(finished_at=at, run_id__gt=run_id)
        )
    runs = runs.filter(Exists(deletable)).only(*PRUNE_FIELDS)
    return list(runs.order_by("finished_at", "run_id")[:limit])


def run_archive(*, run_id: str) -> RunArchive | None:
    return RunArchive.objects.filter(pk=run_id).first()


def run_archives(*, run_ids: list[str]) -> dict[str, RunArchive]:
    return {a.run_id: a for a in RunArchive.objects.filter(pk__in=run_ids)}


def retention_mark() -> tuple[datetime, str] | None:
    """How far retention's walk got: every finished run up to this (finished_at, run_id) done."""
    mark = RetentionMark.objects.filter(pk=1).first()
    return (mark.finished_at, mark.run_id) if mark else None
