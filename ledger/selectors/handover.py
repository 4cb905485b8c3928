"""Who is on a run, and the notes left on it (``ledger.transitions.handover`` writes them)."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Exists, OuterRef, Q, QuerySet

from ledger.models import AuditAction, AuditEvent, Handover

#: The list filter's values: runs the reader is on, runs nobody is on.
MINE, NOBODY = "mine", "nobody"


def handover_of(*, run_id: str) -> Handover | None:
    return Handover.objects.filter(pk=run_id).first()


def handovers_for(*, run_ids: Iterable[str]) -> dict[str, Handover]:
    """The handovers of these runs (one query by primary key), by run id."""
    ids = list(run_ids)
    if not ids:
        return {}
    return {h.run_id: h for h in Handover.objects.filter(pk__in=ids)}


def run_notes(*, run_id: str) -> QuerySet[AuditEvent]:
    """The notes on a run, newest first (served by the audit's (run_id, at) index)."""
    return AuditEvent.objects.filter(run_id=run_id, action=AuditAction.RUN_NOTE).order_by(
        "-at", "-id"
    )


def taken_condition(taken: str, *, who: str) -> Q:
    """The runs list's "on it" filter: ``mine`` (runs ``who`` is on) or ``nobody``."""
    if taken == MINE:
        return Q(Exists(Handover.objects.filter(run_id=OuterRef("pk"), taken_by=who)))
    if taken == NOBODY:
        return ~Q(Exists(Handover.objects.filter(run_id=OuterRef("pk"))))
    return Q()
