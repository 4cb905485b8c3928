"""Retention: finished runs' step rows leave the table for an archive file.

Three transitions, each one short transaction over a batch of runs: ``runs_archive_record`` notes
where their rows went (after the file is complete in the archive store, with an audit row per
run), and ``steps_delete_archived`` deletes one bounded batch of their rows. The run rows, their
outcomes, their settlements and the audit stay; the steps a settlement points at stay too (the
audit's evidence). The file is written by ``ledger.processes.retention`` between commits, never
inside one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Exists, F, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ledger.models import (
    FINAL_STATUSES,
    AuditAction,
    AuditEvent,
    RetentionMark,
    Run,
    RunArchive,
    Settlement,
    Step,
)

Clock = Callable[[], datetime]


def runs_archive_record(
    *,
    versions: Mapping[str, int],
    steps: Mapping[str, int],
    location: str,
    sha256: str,
    by: str,
    reason: str,
    clock: Clock = timezone.now,
) -> list[str]:
    """Record that the rows of the runs in ``versions`` (run id: the version they were read at;
    ``steps``: how many rows each has in the file) are in ``location`` of the archive store; the
    run ids recorded. A run that is not finished any more or changed since it was read is left
    out (nothing written for it: its rows stay, and the next pass archives it again)."""
    now = clock()
    with transaction.atomic():
        locked = (
            Run.objects.select_for_update()
            .filter(pk__in=list(versions), status__in=FINAL_STATUSES)
            .values_list("pk", "version")
        )
        recorded = sorted(run_id for run_id, version in locked if versions[run_id] == version)
        RunArchive.objects.filter(pk__in=recorded).delete()  # an earlier archive, now stale
        rows = [(run_id, steps.get(run_id, 0), versions[run_id]) for run_id in recorded]
        record = _record_sql if connection.vendor == "postgresql" else _record_orm
        record(rows, location=location, sha256=sha256, by=by, reason=reason, now=now)
    return recorded


def _record_sql(
    rows: list[tuple[str, int, int]],
    *,
    location: str,
    sha256: str,
    by: str,
    reason: str,
    now: datetime,
) -> None:
    """The archive and audit rows of a batch in two INSERT … SELECT over arrays: a handful of
    parameters instead of eight or nine a row (ORM bulk inserts of 500 runs spent more time
    binding parameters in Python than PostgreSQL spent inserting)."""  # fmt: skip
    if not rows:
        return
    run_ids, counts, run_versions = (list(column) for column in zip(*rows, strict=True))
    batch = "unnest(%s::varchar[], %s::integer[], %s::integer[]) AS b(run_id, steps, version)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {RunArchive._meta.db_table} (run_id, location, sha256, steps, deleted,"
            " kept, run_version, archived_at, archived_by)"
            f" SELECT b.run_id, %s, %s, b.steps, 0, 0, b.version, %s, %s FROM {batch}",
            [location, sha256, now, by, run_ids, counts, run_versions],
        )
        cursor.execute(
            f"INSERT INTO {AuditEvent._meta.db_table} (actor, at, action, run_id, step_id,"
            " before, after, reason)"
            " SELECT %s, %s, %s, b.run_id, '', NULL,"
            " jsonb_build_object('location', %s::text, 'sha256', %s::text, 'steps', b.steps),"
            f" %s FROM {batch}",
            [by, now, AuditAction.RUN_ARCHIVE.value, location, sha256, reason, run_ids, counts,
             run_versions],
        )  # fmt: skip


def _record_orm(
    rows: list[tuple[str, int, int]],
    *,
    location: str,
    sha256: str,
    by: str,
    reason: str,
    now: datetime,
) -> None:
    RunArchive.objects.bulk_create(
        RunArchive(run_id=run_id, location=location, sha256=sha256, steps=steps,
                   run_version=version, archived_at=now, archived_by=by)
        for run_id, steps, version in rows
    )  # fmt: skip
    AuditEvent.objects.bulk_create(
        AuditEvent(actor=by, at=now, action=AuditAction.RUN_ARCHIVE, run_id=run_id,
                   after=_details(location, sha256, steps), reason=reason)
        for run_id, steps, _ in rows
    )  # fmt: skip


def run_archive_record(
    *,
    run_id: str,
    location: str,
    sha256: str,
    steps: int,
    run_version: int,
    by: str,
    reason: str,
    clock: Clock = timezone.now,
) -> RunArchive | None:
    """One run's ``runs_archive_record``: its archive, or None when the run changed."""
    recorded = runs_archive_record(
        versions={run_id: run_version},
        steps={run_id: steps},
        location=location,
        sha256=sha256,
        by=by,
        reason=reason,
        clock=clock,
    )
    return RunArchive.objects.get(pk=run_id) if recorded else None


def steps_delete_archived(*, run_ids: Sequence[str], limit: int) -> int:
    """Delete up to ``limit`` archived step rows of the runs ``run_ids`` (never one a settlement
    points at, never one of a run that changed since it was archived: the archive no longer
    describes it); the number deleted. When fewer than ``limit`` were left, the runs' archives
    count what was deleted and what stays (``deleted``, ``kept``)."""
    with transaction.atomic():
        archived = list(
            RunArchive.objects.select_for_update(of=("self",))
            .filter(
                pk__in=list(run_ids),
                run__version=F("run_version"),
                run__status__in=FINAL_STATUSES,
            )
            .values_list("pk", flat=True)
        )
        if not archived:
            return 0
        # One DELETE of the first ``limit`` deletable rows, chosen in the statement itself (no
        # round trip of their ids), without the collector's loading of every row: the only
        # relation to a step is a settlement's (PROTECT), excluded here and enforced by its
        # constraint.
        settled = Settlement.objects.filter(step_row=OuterRef("pk"))
        # No ORDER BY: "the first by id" made the planner walk the primary key of the whole
        # table, filtering by run (2 s a batch at 5,000,000 steps); unordered, each run's rows
        # come from its step_run_seq entries.
        first = (
            Step.objects.filter(run_id__in=archived)
            .filter(~Exists(settled))
            .order_by()
            .values("pk")[:limit]
        )
        deleted = Step.objects.filter(pk__in=Subquery(first))._raw_delete(Step.objects.db)
        if deleted < limit:
            left = (
                Step.objects.filter(run_id=OuterRef("pk"))
                .order_by()
                .values("run_id")
                .annotate(n=Count("pk"))
                .values("n")
            )
            kept = Coalesce(Subquery(left, output_field=IntegerField()), Value(0))
            RunArchive.objects.filter(pk__in=archived).update(kept=kept, deleted=F("steps") - kept)
    return deleted


def retention_mark_advance(
    *, finished_at: datetime, run_id: str, clock: Clock = timezone.now
) -> None:
    """Move retention's mark to (``finished_at``, ``run_id``): every finished run up to there is
    done. Never moves it back."""
    with transaction.atomic():
        mark = RetentionMark.objects.select_for_update().filter(pk=1).first()
        if mark is not None and (mark.finished_at, mark.run_id) >= (finished_at, run_id):
            return
        RetentionMark.objects.update_or_create(
            pk=1, defaults={"finished_at": finished_at, "run_id": run_id, "updated_at": clock()}
        )


def _details(location: str, sha256: str, steps: int) -> dict[str, Any]:
    return {"location": location, "sha256": sha256, "steps": steps}
