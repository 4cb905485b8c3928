"""Bulk actions, before they happen: what an action would do to each run of a selection or a
filter. ``ledger.transitions.bulk_apply`` then acts on exactly the runs and versions listed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from ledger.errors import InvalidInput
from ledger.models import FINAL_STATUSES, STOPPED_STATUSES, Run, RunStatus
from ledger.selectors.runs import RunFilter, runs_filtered

BULK_ACTIONS = ("resume", "retry", "cancel", "pause")
BULK_LIMIT = 500


@dataclass(frozen=True)
class BulkPlanItem:
    run_id: str
    agent: str
    status: str
    reason: str
    version: int
    allowed: bool
    will: str  # what the action will do to this run, or why it will skip it
    title: str = ""


@dataclass(frozen=True)
class BulkPlan:
    action: str
    items: list[BulkPlanItem]
    truncated: bool  # more runs matched than BULK_LIMIT; only the first are listed

    @property
    def targets(self) -> dict[str, int]:
        """run id → version of the runs the action applies to (feed this to bulk_apply)."""
        return {i.run_id: i.version for i in self.items if i.allowed}


def bulk_preview(
    *,
    action: str,
    run_ids: Sequence[str] | None = None,
    flt: RunFilter | None = None,
    now: datetime | None = None,
    max_resumes: int | None = None,
    limit: int = BULK_LIMIT,
) -> BulkPlan:
    """What ``action`` would do to each run of a selection (run ids) or of the runs list's
    filter (the same ``RunFilter`` the list and the commands use), judged on the rows. Writes
    nothing. It does not run the dry replay (a selector never runs a process):
    ``ledger.processes.resume.bulk_preview`` adds its verdict, skipping the resumes that would
    stop again at once."""
    check_action(action)
    runs = list(_select(run_ids, flt, now or timezone.now())[: limit + 1])
    items = [_plan(action, run, max_resumes) for run in runs[:limit]]
    return BulkPlan(action=action, items=items, truncated=len(runs) > limit)


def _select(run_ids: Sequence[str] | None, flt: RunFilter | None, now: datetime) -> QuerySet[Run]:
    if run_ids is not None:
        return Run.objects.filter(pk__in=list(run_ids)).order_by("created_at", "run_id")
    if flt is None:
        raise InvalidInput("choose runs, or a filter, for a bulk action")
    return runs_filtered(flt=flt, now=now).order_by("status_changed_at", "run_id")


def _plan(action: str, run: Run, max_resumes: int | None) -> BulkPlanItem:
    allowed, will = _verdict(action, run, max_resumes)
    return BulkPlanItem(
        run_id=run.run_id,
        agent=run.agent,
        status=run.status,
        reason=run.reason,
        version=run.version,
        allowed=allowed,
        will=will,
        title=run.title,
    )


def _verdict(action: str, run: Run, max_resumes: int | None) -> tuple[bool, str]:
    if action == "pause":
        if run.status in FINAL_STATUSES:
            return False, f"skip: already {run.status}"
        if run.status == RunStatus.PAUSED:
            return False, "skip: already paused"
        return True, "pause this run (held at its next step until the pause is lifted)"
    if action == "cancel":
        if run.status in FINAL_STATUSES:
            return False, f"skip: already {run.status}"
        if run.status == RunStatus.RUNNING:
            return True, "cancel; its worker loses the lease and commits nothing more"
        return True, "cancel (final)"
    wanted = STOPPED_STATUSES if action == "resume" else (RunStatus.FAILED,)
    if run.status not in wanted:
        return False, f"skip: {run.status} (only {' or '.join(wanted)} runs)"
    if max_resumes is not None and max_resumes < run.max_resumes:
        return False, f"skip: its budget {run.max_resumes} is above {max_resumes}"
    budget = max_resumes if max_resumes is not None else run.max_resumes
    if run.reason == "budget" and run.resume_count >= budget:
        return False, f"skip: resume budget used up ({run.resume_count} of {budget}); raise it"
    raised = f", budget {run.max_resumes} → {budget}" if budget != run.max_resumes else ""
    return True, f"queue for resume ({run.resume_count} of {budget} resumes used{raised})"


def check_action(action: str) -> None:
    if action not in BULK_ACTIONS:
        raise InvalidInput(f"bulk action must be one of {', '.join(BULK_ACTIONS)}")
