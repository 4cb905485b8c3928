"""Admins' edits of ledger rows (the Django admin calls these): checked, versioned, audited.

An edited result of a succeeded step is an observation that changed after the steps behind it
ran. The engine catches the dependents by itself: a resume replays the edited result, so a
later step whose inputs were built from it hashes differently and stops as stale (the dry
replay shows it stale too). Beside that, the audit row lists the steps downstream of the edit
with their versions, and ``edited_upstream`` reports those not rewritten since, so a page can
mark them "depends on an edited observation" even when their inputs happen to hash the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger import canonical
from ledger.errors import InvalidInput, NotJSON
from ledger.models import (
    FINAL_STATUSES,
    AuditAction,
    Reason,
    Run,
    RunStatus,
    Step,
    StepStatus,
)
from ledger.transitions import notify
from ledger.transitions._common import (
    Actor,
    Clock,
    actor_name,
    check_not_running,
    check_run_version,
    check_step_version,
    lock_run,
    lock_step,
    record,
    require_reason,
    validate_result,
    write_run,
    write_step,
)

# The effect key is not editable: it is what makes the downstream system deduplicate, and a
# new key would let a resume send the effect again.
STEP_EDITABLE = ("status", "result", "next_step_id", "error", "attempt", "expires_at")
RUN_EDITABLE = (
    "status",
    "reason",
    "blocked_step_id",
    "detail",
    "max_resumes",
    "result",
    "error",
    "inputs",
)


def step_admin_edit(
    *,
    step: Step,
    by: Actor,
    reason: str,
    changes: Mapping[str, Any],
    seen_version: int,
    clock: Clock = timezone.now,
) -> Step:
    """Change fields of a ledger row (see ``STEP_EDITABLE``) with a reason, audited.

    Refused while a worker executes the run (its in-memory ledger would overwrite the edit),
    and with ``Conflict`` when the row moved past ``seen_version``. Changes that change nothing
    write nothing.
    """
    name = actor_name(by)
    text = require_reason(reason)
    clean = _clean_step_changes(changes)
    now = clock()
    with transaction.atomic():
        run = lock_run(step.run_id)
        row = lock_step(step.pk)
        check_step_version(row, seen_version)
        check_not_running(run)
        changed = {k: v for k, v in clean.items() if getattr(row, k) != v}
        if not changed:
            return row
        before = {k: getattr(row, k) for k in changed}
        marks: dict[str, Any] = {}
        if {"status", "result"} & changed.keys():
            marks["settled_by"] = f"admin edit by {name}"[:150]
        write_step(row, **changed, **marks, updated_at=now)
        after: dict[str, Any] = dict(changed)
        if "result" in changed and row.status == StepStatus.SUCCEEDED:
            after["downstream"] = _downstream_versions(row)
        record(
            by=name,
            action=AuditAction.STEP_ADMIN_EDIT,
            at=now,
            run_id=row.run_id,
            step_id=row.step_id,
            before=before,
            after=after,
            reason=text,
        )
    return row


def run_admin_edit(
    *,
    run: Run,
    by: Actor,
    reason: str,
    changes: Mapping[str, Any],
    seen_version: int,
    clock: Clock = timezone.now,
) -> Run:
    """Change fields of a run (see ``RUN_EDITABLE``) with a reason, audited. A run is never
    set to running by hand (only a worker's lease does that), nor edited while running."""
    name = actor_name(by)
    text = require_reason(reason)
    clean = _clean_run_changes(changes)
    now = clock()
    with transaction.atomic():
        locked = lock_run(run.run_id)
        check_run_version(locked, seen_version)
        check_not_running(locked)
        changed = {k: v for k, v in clean.items() if getattr(locked, k) != v}
        if not changed:
            return locked
        before = {k: getattr(locked, k) for k in changed}
        marks: dict[str, Any] = {}
        if "status" in changed:
            marks["status_changed_at"] = now
            marks["finished_at"] = now if changed["status"] in FINAL_STATUSES else None
        write_run(locked, **changed, **marks, updated_at=now)
        if "status" in changed:  # a run an admin ends or stops by hand announces it too
            notify.notify_run_event(run_id=locked.run_id, at=now)
        record(
            by=name,
            action=AuditAction.RUN_ADMIN_EDIT,
            at=now,
            run_id=locked.run_id,
            before=before,
            after=changed,
            reason=text,
        )
    return locked


def _downstream_versions(row: Step) -> list[list[Any]]:
    """[step id, version] of each step after ``row`` on the recorded path, in order (a list:
    jsonb does not keep the order of an object's keys)."""
    rows = {s.step_id: s for s in Step.objects.filter(run_id=row.run_id)}
    found: list[list[Any]] = []
    seen = {row.step_id}
    current = row.next_step_id
    while current is not None and current in rows and current not in seen:
        seen.add(current)
        found.append([current, rows[current].version])
        current = rows[current].next_step_id
    return found


def _clean_step_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(changes) - set(STEP_EDITABLE)
    if unknown:
        raise InvalidInput(f"these step fields are not editable: {', '.join(sorted(unknown))}")
    clean = dict(changes)
    if "status" in clean and clean["status"] not in StepStatus.values:
        raise InvalidInput(f"a step status is one of {', '.join(StepStatus.values)}")
    if "result" in clean:
        clean["result"] = None if clean["result"] is None else validate_result(clean["result"])
    if "attempt" in clean and (not isinstance(clean["attempt"], int) or clean["attempt"] < 1):
        raise InvalidInput("attempt is a whole number from 1")
    for key in ("next_step_id", "effect_key"):
        if key in clean:
            clean[key] = (clean[key] or "").strip() or None
    if "error" in clean:
        clean["error"] = clean["error"] or ""
    return clean


def _clean_run_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(changes) - set(RUN_EDITABLE)
    if unknown:
        raise InvalidInput(f"these run fields are not editable: {', '.join(sorted(unknown))}")
    clean = dict(changes)
    status = clean.get("status")
    if status is not None and status not in RunStatus.values:
        raise InvalidInput(f"a run status is one of {', '.join(RunStatus.values)}")
    if status == RunStatus.RUNNING:
        raise InvalidInput("only a worker's lease sets a run running; queue it instead")
    if "reason" in clean and (clean["reason"] or "") not in Reason.values:
        raise InvalidInput(f"a reason is one of {', '.join(v or '(none)' for v in Reason.values)}")
    if "max_resumes" in clean and (
        not isinstance(clean["max_resumes"], int) or clean["max_resumes"] < 0
    ):
        raise InvalidInput("max_resumes is a whole number from 0")
    if "result" in clean and clean["result"] is not None:
        clean["result"] = validate_result(clean["result"], what="the run's result")
    if "inputs" in clean:
        if clean["inputs"] is None:
            raise InvalidInput("a run's inputs cannot be empty; enter {} for none")
        try:
            clean["inputs"] = canonical.normalize(clean["inputs"], step_id="<run inputs>")
        except NotJSON as exc:
            raise InvalidInput(f"the run's inputs are not JSON: {exc}") from None
    for key in ("reason", "blocked_step_id", "detail", "error"):
        if key in clean:
            clean[key] = clean[key] or ""
    return clean
