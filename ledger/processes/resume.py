"""The operator's resume and retry, checked: the dry replay first, then the transition.

A transition never runs a process, so ``ledger.transitions.run_resume`` does not replay the
agent itself: it takes the dry replay's verdict (``stops_again``) from its caller. These are
those callers — the dashboard, the HTTP API, the commands and bulk actions all come here — so
a resume that would stop again at once is refused (``WouldStopAgain``, nothing written, no
resume spent) unless ``anyway``. The dry replay executes agent code: it runs before the
transition's transaction and holds no lock; a run that moves in between is caught by the
transition's version check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ledger import selectors, transitions
from ledger.errors import OperationError
from ledger.models import STOPPED_STATUSES, Run, RunStatus
from ledger.processes.preview import would_stop_again
from ledger.selectors.bulk import BULK_LIMIT, BulkPlan, BulkPlanItem, check_action
from ledger.selectors.runs import RunFilter
from ledger.transitions.bulk import BulkOutcome

_ALLOWED = {"resume": STOPPED_STATUSES, "retry": (RunStatus.FAILED,)}


def verdict(run_id: str, action: str = "resume") -> str:
    """The dry replay's verdict for ``action`` on ``run_id``: "" when a resume would get
    further, or when the run is not one the action applies to (the transition refuses those
    itself, naming the status), else why it would stop again at once."""
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status not in _ALLOWED.get(action, ()):
        return ""
    return would_stop_again(run_id)


def run_resume(*, run_id: str, anyway: bool = False, **kwargs: Any) -> Run:
    """``transitions.run_resume`` (same arguments) after the dry replay."""
    why = "" if anyway else verdict(run_id, "resume")
    return transitions.run_resume(run_id=run_id, anyway=anyway, stops_again=why, **kwargs)


def run_retry(*, run_id: str, anyway: bool = False, **kwargs: Any) -> Run:
    """``transitions.run_retry`` (same arguments) after the dry replay."""
    why = "" if anyway else verdict(run_id, "retry")
    return transitions.run_retry(run_id=run_id, anyway=anyway, stops_again=why, **kwargs)


def bulk_preview(
    *,
    action: str,
    run_ids: Sequence[str] | None = None,
    flt: RunFilter | None = None,
    now: datetime | None = None,
    max_resumes: int | None = None,
    limit: int = selectors.BULK_LIMIT,
) -> BulkPlan:
    """``selectors.bulk_preview`` with the dry replay's verdict: a resume or retry that would
    stop again at once is skipped, with the reason, as ``bulk_apply`` would refuse it."""
    plan = selectors.bulk_preview(
        action=action, run_ids=run_ids, flt=flt, now=now, max_resumes=max_resumes, limit=limit
    )
    if action in ("cancel", "pause"):
        return plan  # nothing resumes: no dry replay to ask
    return replace(plan, items=[_replayed(item) for item in plan.items])


def _replayed(item: BulkPlanItem) -> BulkPlanItem:
    if not item.allowed:
        return item
    why = would_stop_again(item.run_id)
    if not why:
        return item
    return replace(
        item, allowed=False, will=f"skip: it would stop again at once, no resume spent ({why})"
    )


def bulk_apply(
    *, action: str, targets: Mapping[str, int | None], **kwargs: Any
) -> list[BulkOutcome]:
    """``transitions.bulk_apply`` (same arguments) with each resume's or retry's dry replay
    verdict: one that would stop again at once is refused, nothing written for it."""
    check_action(action)
    if len(targets) > BULK_LIMIT:
        raise OperationError(f"a bulk action takes at most {BULK_LIMIT} runs at once")
    resumes = action not in ("cancel", "pause")
    verdicts = {run_id: verdict(run_id, action) if resumes else "" for run_id in targets}
    return transitions.bulk_apply(action=action, targets=targets, stops_again=verdicts, **kwargs)
