"""Finished runs for the retention tests, executed by the engine at a time in the past."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from ledger import transitions
from ledger.models import Run


def finished_survey(execute: Any, clock: Any, *, days_ago: float, records: int) -> Run:
    """A survey run of ``records`` records that finished ``days_ago`` days ago (the fake clock)."""
    clock.now = timezone.now() - timedelta(days=days_ago)
    run = transitions.run_start(agent="survey", inputs={"records": records}, clock=clock)
    assert execute(run.run_id).status == "succeeded"
    return Run.objects.get(pk=run.run_id)
