"""The same run actions on many runs: first a preview of what will happen to each, then the act
with one outcome per run. One run refusing does not stop the others.

The preview resolves a selection (run ids) or a filter to a list of runs with their versions;
``bulk_apply`` acts on exactly that list (the filter is not evaluated again), so a run that
moved in between is refused with a conflict instead of being swept up.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone

from ledger.models import FINAL_STATUSES, Run, RunStatus
from ledger.operations import runs as run_ops
from ledger.operations._common import STOPPED, Actor, Clock, OnCommit, require_reason
from ledger.operations.errors import OperationError

log = logging.getLogger(__name__)

BULK_ACTIONS = ("resume", "retry", "cancel")
BULK_LIMIT = 500


@dataclass(frozen=True)
class RunFilter:
    """Which runs a bulk action targets when no explicit selection is given."""

    status: str | None = None
    reason: str | None = None
    agent: str | None = None
    changed_before: datetime | None = None  # in its present state since before this instant


@dataclass(frozen=True)
class BulkPlanItem:
    run_id: str
    agent: str
    status: str
    reason: str
    version: int
    allowed: bool
    will: str  # what the action will do to this run, or why it will skip it


@dataclass(frozen=True)
class BulkPlan:
    action: str
    items: list[BulkPlanItem]
    truncated: bool  # more runs matched than BULK_LIMIT; only the first are listed

    @property
    def targets(self) -> dict[str, int]:
        """run id → version of the runs the action applies to (feed this to bulk_apply)."""
        return {i.run_id: i.version for i in self.items if i.allowed}


@dataclass(frozen=True)
class BulkOutcome:
    run_id: str
    ok: bool
    message: str
    status: str  # the run's status after the attempt ("" when the run does not exist)


def bulk_preview(
    *,
    action: str,
    run_ids: Sequence[str] | None = None,
    filter: RunFilter | None = None,
    max_resumes: int | None = None,
    limit: int = BULK_LIMIT,
) -> BulkPlan:
    """What ``action`` would do to each selected run. Reads only; writes nothing."""
    _check_action(action)
    runs = list(_select(run_ids, filter)[: limit + 1])
    items = [_plan(action, run, max_resumes) for run in runs[:limit]]
    return BulkPlan(action=action, items=items, truncated=len(runs) > limit)


def bulk_apply(
    *,
    action: str,
    targets: Mapping[str, int | None],
    by: Actor,
    reason: str,
    max_resumes: int | None = None,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
) -> list[BulkOutcome]:
    """Apply ``action`` to each run in ``targets`` (run id → the version the person saw, or
    None for no check), each in its own transaction. Returns one outcome per run, in order."""
    _check_action(action)
    require_reason(reason)
    if len(targets) > BULK_LIMIT:
        raise OperationError(f"a bulk action takes at most {BULK_LIMIT} runs at once")
    outcomes = []
    for run_id, version in targets.items():
        outcomes.append(
            _apply_one(
                action,
                run_id,
                version,
                by=by,
                reason=reason,
                max_resumes=max_resumes,
                on_commit=on_commit,
                clock=clock,
            )
        )
    return outcomes


def _apply_one(
    action: str,
    run_id: str,
    version: int | None,
    *,
    by: Actor,
    reason: str,
    max_resumes: int | None,
    on_commit: OnCommit,
    clock: Clock,
) -> BulkOutcome:
    run = Run(run_id=run_id)  # the actions lock and read the row themselves
    try:
        if action == "cancel":
            done = run_ops.run_cancel(
                run=run, by=by, reason=reason, seen_version=version, clock=clock
            )
            message = "cancelled"
        else:
            act = run_ops.run_resume if action == "resume" else run_ops.run_retry
            done = act(
                run=run,
                by=by,
                reason=reason,
                seen_version=version,
                max_resumes=max_resumes,
                on_commit=on_commit,
                clock=clock,
            )
            message = "queued for a worker to resume"
    except Run.DoesNotExist:
        return BulkOutcome(run_id=run_id, ok=False, message="no such run", status="")
    except OperationError as exc:
        return BulkOutcome(run_id=run_id, ok=False, message=str(exc), status=_status(run_id))
    except Exception as exc:  # one run's failure must not stop the others; its txn rolled back
        log.exception("bulk %s of run %s failed", action, run_id)
        message = f"failed: {type(exc).__name__}: {exc}"
        return BulkOutcome(run_id=run_id, ok=False, message=message, status=_status(run_id))
    return BulkOutcome(run_id=run_id, ok=True, message=message, status=done.status)


def _status(run_id: str) -> str:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first() or ""


def _select(run_ids: Sequence[str] | None, filter: RunFilter | None) -> QuerySet[Run]:
    if run_ids is not None:
        return Run.objects.filter(pk__in=list(run_ids)).order_by("created_at", "run_id")
    if filter is None:
        raise OperationError("choose runs, or a filter, for a bulk action")
    runs = Run.objects.all()
    if filter.status:
        runs = runs.filter(status=filter.status)
    if filter.reason:
        runs = runs.filter(reason=filter.reason)
    if filter.agent:
        runs = runs.filter(agent=filter.agent)
    if filter.changed_before:
        runs = runs.filter(status_changed_at__lt=filter.changed_before)
    return runs.order_by("status_changed_at", "run_id")


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
    )


def _verdict(action: str, run: Run, max_resumes: int | None) -> tuple[bool, str]:
    if action == "cancel":
        if run.status in FINAL_STATUSES:
            return False, f"skip: already {run.status}"
        if run.status == RunStatus.RUNNING:
            return True, "cancel; its worker loses the lease and commits nothing more"
        return True, "cancel (final)"
    wanted = STOPPED if action == "resume" else (RunStatus.FAILED,)
    if run.status not in wanted:
        return False, f"skip: {run.status} (only {' or '.join(wanted)} runs)"
    if max_resumes is not None and max_resumes < run.max_resumes:
        return False, f"skip: its budget {run.max_resumes} is above {max_resumes}"
    budget = max_resumes if max_resumes is not None else run.max_resumes
    if run.reason == "budget" and run.resume_count >= budget:
        return False, f"skip: resume budget used up ({run.resume_count} of {budget}); raise it"
    raised = f", budget {run.max_resumes} → {budget}" if budget != run.max_resumes else ""
    return True, f"queue for resume ({run.resume_count} of {budget} resumes used{raised})"


def _check_action(action: str) -> None:
    if action not in BULK_ACTIONS:
        raise OperationError(f"bulk action must be one of {', '.join(BULK_ACTIONS)}")
