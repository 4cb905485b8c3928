"""Schedules: the list the commands, the API and the Schedules page read, one schedule by id or
by its live name, and a schedule's runs."""

from __future__ import annotations

from django.db.models import QuerySet

from ledger.models import Run, Schedule


def schedules_list(*, removed: bool = False) -> QuerySet[Schedule]:
    """The live schedules by name (``removed``: the removed ones too, after them)."""
    rows = Schedule.objects.all()
    if not removed:
        rows = rows.filter(removed_at__isnull=True)
    return rows.order_by("removed_at", "name", "schedule_id")


def schedule_named(ref: str) -> Schedule | None:
    """The schedule whose id is ``ref`` (``sch_…``), or the live one named ``ref``."""
    if not isinstance(ref, str) or not ref or "\x00" in ref:
        return None
    if ref.startswith("sch_"):
        return Schedule.objects.filter(pk=ref).first()
    return Schedule.objects.filter(name=ref, removed_at__isnull=True).first()


def schedule_runs(schedule_id: str) -> QuerySet[Run]:
    """The runs a schedule's ticks started, newest first (index ``run_schedule``)."""
    return Run.objects.filter(schedule=schedule_id).order_by("-created_at")
