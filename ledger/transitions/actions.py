"""A person's actions on whole runs: resume, retry, cancel, fork, start a clean run. Each is
audited.

Each is one transaction: the run row locked, the version the person saw compared, one
compare-and-set, the audit row. The dashboard, the commands (as ``cli:<login>``) and bulk
actions all call these. ``on_commit`` receives the run id to execute once that transaction
commits (the dashboard passes a function that enqueues the Celery task).
"""

from __future__ import annotations

import warnings
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ledger.errors import NotAllowed, WouldStopAgain
from ledger.models import FINAL_STATUSES, AuditAction, Run, RunArchive, RunStatus, Step, StepStatus
from ledger.selectors.runs import SentAgain, effects_sent_again
from ledger.transitions._common import (
    STOPPED_STATUSES,
    Actor,
    Clock,
    OnCommit,
    actor_name,
    announce_queued,
    cancel,
    check_run_version,
    deprecated_on_commit,
    lock_run,
    record,
    requeue,
    require_reason,
    run_snapshot,
)
from ledger.transitions.lifecycle import run_start

# Fields a fork copies from each ledger row (the row's identity, run and version are new).
_COPIED = [
    f.name
    for f in Step._meta.concrete_fields
    if f.name not in ("id", "run", "version", "updated_at", "next_step_id")
]


def run_resume(
    *,
    run_id: str,
    by: Actor,
    reason: str,
    seen_version: int | None,
    max_resumes: int | None = None,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
    anyway: bool = False,
    stops_again: str | None = None,
) -> Run:
    """Queue a stopped run (needs attention or failed) for a worker; optionally raise its
    resume budget (never lower it). ``seen_version=None`` skips the version check.

    ``stops_again`` is the dry replay's verdict, which the caller obtained (a transition never
    runs a process): "" when a resume would get further, else the sentence saying why it would
    stop again — then refused with ``WouldStopAgain`` (nothing written, no resume spent) unless
    ``anyway``. ``ledger.processes.resume.run_resume`` runs the dry replay and calls this."""
    return _requeue(
        run_id=run_id,
        by=by,
        reason=reason,
        seen_version=seen_version,
        max_resumes=max_resumes,
        on_commit=deprecated_on_commit(on_commit, "run_resume"),
        clock=clock,
        allowed=STOPPED_STATUSES,
        action=AuditAction.RUN_RESUME,
        anyway=anyway,
        stops_again=stops_again,
        name="run_resume",
    )


def run_retry(
    *,
    run_id: str,
    by: Actor,
    reason: str,
    seen_version: int | None,
    max_resumes: int | None = None,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
    anyway: bool = False,
    stops_again: str | None = None,
) -> Run:
    """Retry a failed run: the resume replays what succeeded and executes the failed step
    again (attempt + 1, the same effect key when it is an effect). Refused like
    ``run_resume`` when ``stops_again`` says it would stop again at once, unless ``anyway``;
    ``ledger.processes.resume.run_retry`` runs the dry replay and calls this."""
    return _requeue(
        run_id=run_id,
        by=by,
        reason=reason,
        seen_version=seen_version,
        max_resumes=max_resumes,
        on_commit=deprecated_on_commit(on_commit, "run_retry"),
        clock=clock,
        allowed=(RunStatus.FAILED,),
        action=AuditAction.RUN_RETRY,
        anyway=anyway,
        stops_again=stops_again,
        name="run_retry",
    )


def _requeue(
    *,
    run_id: str,
    by: Actor,
    reason: str,
    seen_version: int | None,
    max_resumes: int | None,
    on_commit: OnCommit,
    clock: Clock,
    allowed: tuple[str, ...],
    action: str,
    anyway: bool,
    stops_again: str | None,
    name: str,
) -> Run:
    if stops_again is None and not anyway:
        _warn_unchecked(name)
    who = actor_name(by)
    text = require_reason(reason)
    with transaction.atomic():
        locked = lock_run(run_id)
        check_run_version(locked, seen_version)
        _refuse_archived(locked.run_id)
        if locked.status not in allowed:
            raise NotAllowed(
                f"run {locked.run_id} is {locked.status}; {action.replace('run_', '')} applies "
                f"to a run that is {' or '.join(s.replace('_', ' ') for s in allowed)}"
            )
        if stops_again and not anyway:
            raise WouldStopAgain(locked.run_id, stops_again)
        before = run_snapshot(locked)
        requeue(locked, max_resumes=max_resumes, clock=clock)
        record(
            by=who,
            action=action,
            at=clock(),
            run_id=locked.run_id,
            before=before,
            after=run_snapshot(locked),
            reason=text,
        )
        announce_queued(locked.run_id, cause=action.replace("run_", ""), on_commit=on_commit)
    return locked


def _warn_unchecked(name: str) -> None:
    warnings.warn(
        f"transitions.{name} no longer runs the dry replay itself (a transition never runs a "
        f"process): call ledger.processes.resume.{name} for the checked {name[4:]}, or pass "
        "the verdict (stops_again=ledger.processes.preview.would_stop_again(run_id)) or "
        "anyway=True",
        DeprecationWarning,
        stacklevel=4,
    )


def _refuse_archived(run_id: str) -> None:
    """A run whose steps retention archived has no ledger to replay: resuming or retrying it
    would execute every step again (effects included), and a fork would copy nothing."""
    if RunArchive.objects.filter(pk=run_id).exists():
        raise NotAllowed(
            f"run {run_id}'s ledger was archived by retention (manage.py prune_runs): it can be "
            "inspected from its archive, not resumed, retried or forked"
        )


def run_cancel(
    *,
    run_id: str,
    by: Actor,
    reason: str,
    seen_version: int | None,
    clock: Clock = timezone.now,
) -> Run:
    """Cancel a run for good. A worker executing it loses its lease and can commit nothing."""
    name = actor_name(by)
    text = require_reason(reason)
    with transaction.atomic():
        locked = lock_run(run_id)
        check_run_version(locked, seen_version)
        if locked.status in FINAL_STATUSES:
            raise NotAllowed(
                f"run {locked.run_id} is already {locked.status}; cancel is for "
                "runs that have not finished"
            )
        before = run_snapshot(locked)
        cancel(locked, detail=f"cancelled by {name}: {text}", clock=clock)
        record(
            by=name,
            action=AuditAction.RUN_CANCEL,
            at=clock(),
            run_id=locked.run_id,
            before=before,
            after=run_snapshot(locked),
            reason=text,
        )
    return locked


def run_fork(
    *,
    run_id: str,
    step_id: str,
    by: Actor,
    reason: str,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
    confirm_resend: int | None = None,
) -> Run:
    """Start a new run of the same agent and inputs whose ledger is a copy of ``run``'s up to
    and including ``step_id`` (parent=run, parent_kind='fork', forked_from_step_id=step_id).

    Every copied row must be succeeded; copied effect rows keep their effect keys and replay
    (never sent again), and effects after the fork point get keys of the new run id. The source
    run is not changed. The fork is queued and ``on_commit(fork_run_id)`` runs after the commit.

    When the source has effects after the fork point that were sent (or may have been), the
    fork would send them again: refused unless ``confirm_resend`` is their number (the person
    saw the list, ``selectors.effects_sent_again``, and confirmed it); the audit lists them.
    """
    name = actor_name(by)
    text = require_reason(reason)
    source = Run.objects.get(pk=run_id)
    _refuse_archived(run_id)
    path = _path_to(source, step_id)  # one SELECT: a consistent snapshot of the ledger
    sent = effects_sent_again(run_id=run_id, kept=frozenset(r.step_id for r in path))
    _check_resend(sent, confirm_resend, "this fork")
    now = clock()
    with transaction.atomic():
        try:
            fork = run_start(
                agent=source.agent,
                inputs=source.inputs,
                max_resumes=source.max_resumes,
                clock=clock,
                parent=source,
                parent_kind="fork",
                forked_from_step_id=step_id,
            )
        except LookupError as exc:
            raise NotAllowed(f"cannot fork: {exc}") from None
        Step.objects.bulk_create(
            [_copy(row, fork, now, last=i == len(path) - 1) for i, row in enumerate(path)]
        )
        copied = [r.step_id for r in path]
        for event_run, other in ((source.run_id, fork.run_id), (fork.run_id, source.run_id)):
            record(
                by=name,
                action=AuditAction.RUN_FORK,
                at=now,
                run_id=event_run,
                step_id=step_id,
                before={"parent_run_id": source.run_id},
                after={
                    "fork_run_id": fork.run_id,
                    "other_run_id": other,
                    "copied": copied,
                    "sent_again": [e.as_audit() for e in sent],
                },
                reason=text,
            )
        announce_queued(
            fork.run_id, cause="fork", on_commit=deprecated_on_commit(on_commit, "run_fork")
        )
    return fork


def run_start_clean(
    *,
    run_id: str,
    by: Actor,
    reason: str,
    seen_version: int | None,
    on_commit: OnCommit = None,
    clock: Clock = timezone.now,
    confirm_resend: int | None = None,
) -> Run:
    """Replace a stopped run by a clean run of the same agent and inputs with an empty ledger
    (the way forward from a divergence under ``refuse``): the new run's parent is the old one
    (``parent_kind='clean'``), the old run is cancelled if it had not finished, both in one
    transaction with an audit row on each run. ``on_commit(new_run_id)`` runs after the commit.

    Refused while a worker executes the old run, and while it holds an effect whose outcome
    nobody knows (``started``): settle that first, or the clean run could do it twice. The old
    run's sent effects are sent again by the clean run under its own keys: refused unless
    ``confirm_resend`` is their number, as for ``run_fork``; the audit lists them.
    """
    name = actor_name(by)
    text = require_reason(reason)
    with transaction.atomic():
        old = lock_run(run_id)
        check_run_version(old, seen_version)
        if old.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            raise NotAllowed(
                f"run {old.run_id} is {old.status}; a clean run replaces a run that has stopped"
            )
        started = Step.objects.filter(run=old, status=StepStatus.STARTED)
        unknown = list(started.values_list("step_id", flat=True))
        if unknown:
            raise NotAllowed(
                "settle the started effects first (nobody knows whether they happened, and a "
                "clean run could do them again): " + ", ".join(unknown)
            )
        sent = effects_sent_again(run_id=old.run_id)
        _check_resend(sent, confirm_resend, "this clean run")
        before = run_snapshot(old)
        try:
            new = run_start(
                agent=old.agent,
                inputs=old.inputs,
                clock=clock,
                parent=old,
                parent_kind="clean",
            )
        except LookupError as exc:
            raise NotAllowed(f"cannot start a clean run: {exc}") from None
        if old.status not in FINAL_STATUSES:
            cancel(old, detail=f"replaced by clean run {new.run_id} ({name}: {text})", clock=clock)
        now = clock()
        for event_run, other in ((old.run_id, new.run_id), (new.run_id, old.run_id)):
            record(
                by=name,
                action=AuditAction.RUN_CLEAN,
                at=now,
                run_id=event_run,
                before=before if event_run == old.run_id else {"replaces": old.run_id},
                after={
                    "clean_run_id": new.run_id,
                    "other_run_id": other,
                    "old": run_snapshot(old),
                    "sent_again": [e.as_audit() for e in sent],
                },
                reason=text,
            )
        announce_queued(
            new.run_id, cause="clean", on_commit=deprecated_on_commit(on_commit, "run_start_clean")
        )
    return new


def _check_resend(sent: list[SentAgain], confirm_resend: int | None, what: str) -> None:
    """Refuse a new run that would send effects again unless the person confirmed how many."""
    if not sent or confirm_resend == len(sent):
        return
    listed = "; ".join(
        f"{e.step_id} ({e.tool}, {e.old_status} under key {e.old_key})" for e in sent[:10]
    )
    more = f"; and {len(sent) - 10} more" if len(sent) > 10 else ""
    raise NotAllowed(
        f"{what} would send {len(sent)} effect{'s' if len(sent) != 1 else ''} again under new "
        f"keys: {listed}{more}. Confirm that it sends {len(sent)} again to go ahead"
    )


def _path_to(run: Run, step_id: str) -> list[Step]:
    rows = {s.step_id: s for s in Step.objects.filter(run=run)}
    live = [r for r in rows.values() if r.status != StepStatus.ABANDONED]
    if step_id not in rows:
        raise NotAllowed(f"run {run.run_id} has no step {step_id!r}")
    current: str | None = min(live, key=lambda r: r.seq).step_id if live else None
    path: list[Step] = []
    while current is not None and current in rows and len(path) <= len(rows):
        path.append(rows[current])
        if current == step_id:
            break
        current = rows[current].next_step_id
    if not path or path[-1].step_id != step_id:
        raise NotAllowed(f"step {step_id!r} is not on run {run.run_id}'s recorded path")
    unsettled = [r.step_id for r in path if r.status != StepStatus.SUCCEEDED]
    if unsettled:
        raise NotAllowed(
            "a fork copies succeeded steps only; not succeeded on the way: " + ", ".join(unsettled)
        )
    return path


def _copy(row: Step, fork: Run, now: datetime, *, last: bool) -> Step:
    copy = Step(run=fork, updated_at=now, version=1)
    for name in _COPIED:
        setattr(copy, name, getattr(row, name))
    # The fork point's successor is whatever the fork does next; earlier links are the path.
    copy.next_step_id = None if last else row.next_step_id
    return copy
