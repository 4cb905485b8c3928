"""Stale checkpoints: accept the stored result for today's inputs, or re-execute from a step.

A ``succeeded`` row whose stored input hash differs from the hash of today's inputs stops its
run with reason ``stale``. A person either

- accepts the stored result: today's inputs and hash (from the dry replay,
  ``ledger.processes.preview.stale_entry``, which the caller runs first, outside the transaction)
  are
  recorded on the row, so the resume replays it; or
- re-executes from it: the step and the non-effect steps after it (following ``next_step_id``)
  go back to ``pending`` and run again on resume; effect rows after it are kept as they are, so
  a succeeded effect replays (or, if its inputs moved, stops as stale) and is never sent twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from ledger import canonical
from ledger.errors import Conflict, NotAllowed
from ledger.models import AuditAction, Run, RunStatus, Step, StepKind, StepStatus
from ledger.transitions._common import (
    STOPPED_STATUSES,
    Actor,
    Clock,
    OnCommit,
    actor_name,
    check_not_running,
    check_step_version,
    deprecated_on_commit,
    lock_run,
    lock_step,
    queue_resume,
    record,
    require_reason,
    run_snapshot,
    step_snapshot,
    write_step,
)
from ledger.transitions.steps import stored_inputs


@dataclass(frozen=True)
class TodaysInputs:
    """What the dry replay computed for a stale step: today's inputs and their hash, compared
    against the row whose stored hash was ``stored_hash``."""

    stored_hash: str
    current_hash: str
    current_inputs: Any


def step_accept_stale(
    *,
    step: Step,
    today: TodaysInputs,
    by: Actor,
    reason: str,
    seen_version: int,
    resume: bool = True,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
) -> Step:
    """Record today's inputs and hash on a stale step, keeping its stored result.

    ``today`` comes from the dry replay (``ledger.processes.preview.stale_entry``), run before,
    outside
    the transaction; the write checks that the row is the one the replay compared (same
    version, same stored hash). When the run is stopped on this very step, it is queued for
    resume (``resume=False`` leaves it stopped).
    """
    name = actor_name(by)
    text = require_reason(reason)
    entry = today
    now = clock()
    with transaction.atomic():
        run = lock_run(step.run_id)
        row = lock_step(step.pk)
        check_step_version(row, seen_version)
        check_not_running(run)
        if row.status != StepStatus.SUCCEEDED:
            raise NotAllowed(
                f"step {row.step_id!r} is {row.status}: only a succeeded step's stored result "
                "can be accepted (settle it instead)"
            )
        if row.input_hash != entry.stored_hash:
            raise Conflict(
                "this step changed while its inputs were being compared; look again",
                current=step_snapshot(row),
            )
        before = step_snapshot(row) | {"inputs": row.inputs}
        stored, truncated = stored_inputs(canonical.dumps(entry.current_inputs))
        write_step(
            row,
            input_hash=entry.current_hash,
            inputs=json.loads(stored) if stored is not None else None,
            inputs_truncated=truncated,
            updated_at=now,
        )
        queued = "not queued"
        if resume and _blocked_on(run, row.step_id):
            queued = queue_resume(
                run,
                cause="stale",
                on_commit=deprecated_on_commit(on_commit, "step_accept_stale"),
                clock=clock,
            )
        record(
            by=name,
            action=AuditAction.STALE_ACCEPT,
            at=now,
            run_id=run.run_id,
            step_id=row.step_id,
            before=before,
            after=step_snapshot(row) | {"inputs": row.inputs, "resume": queued},
            reason=text,
        )
    return row


def run_reexecute_from(
    *,
    run_id: str,
    step_id: str,
    by: Actor,
    reason: str,
    seen_version: int,
    resume: bool = True,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
) -> list[str]:
    """Reset ``step_id`` and the non-effect steps after it to ``pending``; keep effect rows.

    ``seen_version`` is the version of the step ``step_id`` the person saw. The run must be
    stopped (needs attention, or failed); it is queued for resume unless ``resume=False``.
    Returns the step ids that were reset, in chain order.
    """
    name = actor_name(by)
    text = require_reason(reason)
    now = clock()
    with transaction.atomic():
        locked = lock_run(run_id)
        rows = {s.step_id: s for s in Step.objects.select_for_update().filter(run=locked)}
        start = rows.get(step_id)
        if start is None:
            raise NotAllowed(f"run {run_id} has no step {step_id!r}")
        check_step_version(start, seen_version)
        _check_reexecutable(locked, start)
        chain = _chain(rows, step_id)
        reset = [r for r in chain if r.kind != StepKind.EFFECT and r.status != StepStatus.ABANDONED]
        before = {"run": run_snapshot(locked), "steps": [step_snapshot(r) for r in reset]}
        for row in reset:
            write_step(
                row, status=StepStatus.PENDING, result=None, finished_at=None, updated_at=now
            )
        later = deprecated_on_commit(on_commit, "run_reexecute_from")
        queued = (
            queue_resume(locked, cause="stale", on_commit=later, clock=clock) if resume else "no"
        )
        locked.refresh_from_db()
        record(
            by=name,
            action=AuditAction.REEXECUTE_FROM,
            at=now,
            run_id=locked.run_id,
            step_id=step_id,
            before=before,
            after={
                "run": run_snapshot(locked),
                "reset": [r.step_id for r in reset],
                "kept_effects": [r.step_id for r in chain if r.kind == StepKind.EFFECT],
                "resume": queued,
            },
            reason=text,
        )
    return [r.step_id for r in reset]


def _check_reexecutable(run: Run, start: Step) -> None:
    check_not_running(run)
    if run.status not in STOPPED_STATUSES:
        raise NotAllowed(
            f"run {run.run_id} is {run.status}; re-execute from a step of a stopped run, "
            "or fork a new run from it"
        )
    if start.kind == StepKind.EFFECT:
        raise NotAllowed(
            f"step {start.step_id!r} is an effect: effects are never re-executed by hand "
            "(settle it, accept its result, or fork the run)"
        )
    if start.status not in (StepStatus.SUCCEEDED, StepStatus.FAILED):
        raise NotAllowed(f"step {start.step_id!r} is {start.status}; nothing to re-execute")


def _chain(rows: dict[str, Step], start: str) -> list[Step]:
    """The step and every step after it on the recorded path (next_step_id links)."""
    chain: list[Step] = []
    seen: set[str] = set()
    current: str | None = start
    while current is not None and current not in seen and current in rows:
        seen.add(current)
        chain.append(rows[current])
        current = rows[current].next_step_id
    return chain


def _blocked_on(run: Run, step_id: str) -> bool:
    return run.status == RunStatus.NEEDS_ATTENTION and run.blocked_step_id == step_id
