"""Retention: a finished run's step rows leave the table for an archive file.

Two transitions, each one short transaction: ``run_archive_record`` notes where the rows went
(after the file is complete, with the audit row), and ``steps_delete_archived`` deletes one
bounded batch of them. The run row, its outcome, its settlements and the audit stay; the steps
a settlement points at stay too (the audit's evidence). The file is written by
``ledger.processes.retention`` between commits, never inside one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ledger.models import FINAL_STATUSES, AuditAction, Run, RunArchive, Step
from ledger.transitions._common import record

Clock = Callable[[], datetime]


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
    """Record that ``run_id``'s ``steps`` rows are in ``location``; None (nothing written) when
    the run is not finished any more or changed since it was read (its version)."""
    now = clock()
    with transaction.atomic():
        locked = (
            Run.objects.select_for_update()
            .filter(pk=run_id, version=run_version, status__in=FINAL_STATUSES)
            .first()
        )
        if locked is None:
            return None
        details: dict[str, Any] = {"location": location, "sha256": sha256, "steps": steps}
        archive, _ = RunArchive.objects.update_or_create(
            run=locked,
            defaults={
                **details,
                "run_version": run_version,
                "archived_at": now,
                "archived_by": by,
                "deleted": 0,
            },
        )
        record(
            by=by,
            action=AuditAction.RUN_ARCHIVE,
            at=now,
            run_id=run_id,
            after=details,
            reason=reason,
        )
    return archive


def steps_delete_archived(*, run_id: str, limit: int) -> int:
    """Delete up to ``limit`` archived step rows of ``run_id`` (never one a settlement points
    at); the number deleted. 0 when none is left, or when the run changed since it was archived
    (then its rows stay: the archive no longer describes them)."""
    with transaction.atomic():
        archive = RunArchive.objects.select_for_update().filter(pk=run_id).first()
        if archive is None:
            return 0
        unchanged = Run.objects.filter(
            pk=run_id, version=archive.run_version, status__in=FINAL_STATUSES
        ).exists()
        if not unchanged:
            return 0
        ids = list(
            Step.objects.filter(run_id=run_id, settlements__isnull=True)
            .order_by("pk")
            .values_list("pk", flat=True)[:limit]
        )
        if ids:
            Step.objects.filter(pk__in=ids).delete()
        kept = Step.objects.filter(run_id=run_id).count() if len(ids) < limit else archive.kept
        RunArchive.objects.filter(pk=run_id).update(deleted=F("deleted") + len(ids), kept=kept)
    return len(ids)
