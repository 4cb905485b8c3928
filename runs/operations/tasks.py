"""Celery tasks: thin wrappers that take run ids and call ledger functions.

A task may be delivered twice, late, or never. Twice and late are harmless: the run's lease
admits one executor and a finished run is not claimable. Never is repaired by the sweep, which
re-queues runs whose lease expired and runs that sat queued with no worker. Tasks never retry:
recovery is a resume from the ledger, not a broker redelivery.
"""

from __future__ import annotations

import logging
import os
import warnings
from functools import partial

from celery import Task, shared_task
from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone

from ledger import faultpoints, logcontext, transitions
from ledger.models import Run
from ledger.processes import delivery, execute
from ledger.processes import sweep as sweeping
from ledger.signals import notifications_queued

log = logging.getLogger(__name__)


def _worker_name(task: Task) -> str:
    return f"{task.request.hostname or 'celery'}/pid:{os.getpid()}"


def _execute(task: Task, run_id: str, why: str) -> str | None:
    """Execute the run if this worker can claim it; the outcome's status, or None."""
    with logcontext.bound(run_id=run_id, worker=_worker_name(task)):
        return _execute_bound(task, run_id, why)


def _execute_bound(task: Task, run_id: str, why: str) -> str | None:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        log.warning("%s of run %s: no such run; nothing to do", why, run_id)
        return None
    outcome = execute.run_execute(run_id=run_id, worker=_worker_name(task))
    # After the outcome's commit, before the broker's acknowledgement (a no-op in production).
    faultpoints.point("task.after_execute")
    if outcome is None:
        log.info(
            "%s of run %s: nothing recorded by this worker (the run was %s: finished, leased by "
            "another worker, or this worker lost its lease)",
            why,
            run_id,
            status,
        )
        return None
    log.info("%s of run %s: %s %s", why, run_id, outcome.status, outcome.reason)
    return outcome.status


@shared_task(bind=True, name="runledger.start_run")
def start_run(self: Task, run_id: str) -> str | None:
    """Execute a newly started run."""
    return _execute(self, run_id, "start")


@shared_task(bind=True, name="runledger.resume_run")
def resume_run(self: Task, run_id: str) -> str | None:
    """Resume a run from its ledger (after a crash, a settlement, or a raised budget)."""
    return _execute(self, run_id, "resume")


@shared_task(name="runledger.sweep")
def sweep() -> list[str]:
    """Re-queue runs whose worker lease expired, and runs whose message was lost (each is
    announced by its re-queue and sent to the resume task from there)."""
    return sweeping.runs_sweep()


@shared_task(name="runledger.prune")
def prune() -> int:
    """Retention on beat's schedule (RUNLEDGER_PRUNE_AFTER_DAYS): archive and delete the step
    rows of runs finished longer ago than that, for at most RUNLEDGER_PRUNE_BUDGET_SECONDS (the
    rest is the next tick's); the number of runs pruned."""
    from datetime import timedelta

    from django.conf import settings

    from ledger.processes import retention

    done = retention.prune_finished(
        finished_before=timezone.now() - timedelta(days=settings.RUNLEDGER_PRUNE_AFTER_DAYS),
        store=retention.archive_store(),
        by="beat:prune",
        runs_per_file=settings.RUNLEDGER_PRUNE_RUNS_PER_FILE,
        budget=float(settings.RUNLEDGER_PRUNE_BUDGET_SECONDS),
        from_mark=True,
    )
    log.info(
        "retention: %s runs pruned, %s rows deleted, %s files, %.1f s%s",
        done.runs, done.deleted, done.files, done.seconds,
        " (budget spent, more left for the next tick)" if done.more else "",
    )  # fmt: skip
    return done.runs


def send_start(run_id: str) -> None:
    """Send start_run now (the receiver of ``run_queued`` calls it after the commit)."""
    _send(start_run, run_id)


def send_resume(run_id: str) -> None:
    """Send resume_run now (the receiver of ``run_queued`` calls it after the commit)."""
    _send(resume_run, run_id)


def enqueue_start(run_id: str) -> None:
    """Deprecated: every queued run is announced by ``ledger.signals.run_queued``, which sends
    it. Sends start_run once the current transaction commits."""
    _deprecated("enqueue_start")
    transaction.on_commit(partial(_send, start_run, run_id))


def enqueue_resume(run_id: str) -> None:
    """Deprecated, as ``enqueue_start``: sends resume_run once the transaction commits."""
    _deprecated("enqueue_resume")
    transaction.on_commit(partial(_send, resume_run, run_id))


def _deprecated(name: str) -> None:
    warnings.warn(
        f"runs.operations.tasks.{name} is deprecated: the ledger announces every queued run "
        "(ledger.signals.run_queued) and the workers enqueue it",
        DeprecationWarning,
        stacklevel=3,
    )


def _send(task: Task, run_id: str) -> None:
    try:
        task.delay(run_id)
    except Exception:
        # The run stays queued in the ledger; the sweep enqueues it again once it looks lost.
        log.exception("could not enqueue %s for run %s; the sweep will retry", task.name, run_id)


@shared_task(name="runledger.notifications")
def notifications() -> int:
    """Queue reminders for long waits, then deliver every due notification (beat runs it every
    RUNLEDGER_NOTIFY_EVERY_SECONDS; an event also sends it after its commit)."""
    transitions.notifications_remind(now=timezone.now())
    return sum(1 for d in delivery.deliver_due() if d.ok)


@receiver(notifications_queued)
def _deliver_soon(sender: object, **kwargs: object) -> None:
    try:
        notifications.delay()
    except Exception:
        log.exception("could not enqueue the notification delivery; beat delivers them")
