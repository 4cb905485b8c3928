"""The same run action on many runs, with one outcome per run: each run is its own transition
(its own transaction, version check and audit row), so one run refusing does not stop the others.

``bulk_apply`` acts on exactly the runs and versions that ``ledger.selectors.bulk_preview``
listed (the filter is not evaluated again), so a run that moved in between is refused with a
conflict instead of being swept up.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from django.utils import timezone

from ledger.errors import OperationError
from ledger.models import Run
from ledger.selectors.bulk import BULK_LIMIT, check_action
from ledger.transitions import actions, pauses
from ledger.transitions._common import (
    Actor,
    Clock,
    OnCommit,
    deprecated_on_commit,
    require_reason,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BulkOutcome:
    run_id: str
    ok: bool
    message: str
    status: str  # the run's status after the attempt ("" when the run does not exist)


def bulk_apply(
    *,
    action: str,
    targets: Mapping[str, int | None],
    by: Actor,
    reason: str,
    max_resumes: int | None = None,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
    stops_again: Mapping[str, str] | None = None,
) -> list[BulkOutcome]:
    """Apply ``action`` to each run in ``targets`` (run id → the version the person saw, or
    None for no check), each in its own transaction. Returns one outcome per run, in order.

    ``stops_again`` (run id → the dry replay's verdict, see ``run_resume``) refuses a resume or
    retry that would stop again at once; ``ledger.processes.resume.bulk_apply`` obtains it."""
    check_action(action)
    require_reason(reason)
    if len(targets) > BULK_LIMIT:
        raise OperationError(f"a bulk action takes at most {BULK_LIMIT} runs at once")
    later = deprecated_on_commit(on_commit, "bulk_apply")
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
                on_commit=later,
                clock=clock,
                stops_again=None if stops_again is None else stops_again.get(run_id),
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
    stops_again: str | None,
) -> BulkOutcome:
    try:
        if action == "pause":
            pauses.pause_create(scope="run", target=run_id, by=by, reason=reason, clock=clock)
            return BulkOutcome(run_id=run_id, ok=True, message="paused", status=_status(run_id))
        if action == "cancel":
            done = actions.run_cancel(
                run_id=run_id, by=by, reason=reason, seen_version=version, clock=clock
            )
            message = "cancelled"
        else:
            act = actions.run_resume if action == "resume" else actions.run_retry
            done = act(
                run_id=run_id,
                by=by,
                reason=reason,
                seen_version=version,
                max_resumes=max_resumes,
                clock=clock,
                stops_again=stops_again,
            )
            if on_commit is not None:  # deprecated: run_resume's commit announced the run
                on_commit(done.run_id)
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
