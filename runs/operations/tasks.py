"""Celery tasks: thin wrappers that take run ids and call ledger functions.

A task may be delivered twice, late, or never. Twice and late are harmless: the run's lease
admits one executor and a finished run is not claimable. Never is repaired by the sweep, which
re-queues runs whose lease expired and runs that sat queued with no worker. Tasks do not retry
what the agent did (recovery is a resume from the ledger), with one exception: a task that
cannot reach the database (``OperationalError``, ``InterfaceError``: a restart, a fail-over, a
cut connection) before its run is claimed is sent again with back-off (``DATABASE_ERRORS``)
instead of being acknowledged and left to the 300 s re-queue rule. Once a run is claimed, a
lost database ends that execution (``ledger.processes.execute``): its lease expires and the
sweep re-queues it.
"""

from __future__ import annotations

import logging
import os
import warnings
from datetime import datetime
from functools import partial
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Reject
from django.db import InterfaceError, OperationalError, transaction
from django.dispatch import receiver
from django.utils import timezone

from ledger import faultpoints, logcontext, transitions
from ledger.engine import drain as engine_drain
from ledger.models import Run
from ledger.processes import alerting, delivery, execute
from ledger.processes import sweep as sweeping
from ledger.signals import notifications_queued
from runs.operations import drain

log = logging.getLogger(__name__)

#: A database that does not answer: the task is published again after 1, 2, 4 … s (full
#: jitter, at most 10 s apart), for as long as it takes. Why not ``acks_late`` + reject and
#: requeue: a requeued message comes straight back (no back-off), a hot loop of 40 workers'
#: slots against a restarting server; a retry is a new message with a countdown, so a run waits
#: at most 10 s after the database is back. Safe: nothing was claimed or written.
DATABASE_ERRORS = (OperationalError, InterfaceError)
RETRY_BACKOFF_MAX = 10
#: The run tasks' decorator: bound, and retried with back-off on ``DATABASE_ERRORS``.
run_task = partial(
    shared_task,
    bind=True,
    autoretry_for=DATABASE_ERRORS,
    retry_backoff=1,
    retry_backoff_max=RETRY_BACKOFF_MAX,
    retry_jitter=True,
    max_retries=None,
)


def _worker_name(task: Task) -> str:
    return f"{task.request.hostname or 'celery'}/pid:{os.getpid()}"


def _execute(task: Task, run_id: str, why: str) -> str | None:
    """Execute the run if this worker can claim it; the outcome's status, or None. A worker
    that is stopping (draining) claims nothing more: the message goes back to the broker for
    another worker."""
    if engine_drain.requested():
        raise Reject(f"{why} of run {run_id}: this worker is stopping", requeue=True)
    with logcontext.bound(run_id=run_id, worker=_worker_name(task)), drain.executing():
        return _execute_bound(task, run_id, why)


def _execute_bound(task: Task, run_id: str, why: str) -> str | None:
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        log.warning("%s of run %s: no such run; nothing to do", why, run_id)
        return None
    outcome = execute.run_execute(
        run_id=run_id,
        worker=_worker_name(task),
        task_id=task.request.id or "",
        clock=faultpoints.clock(),  # timezone.now, unless the equipment set a test's
    )
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


@run_task(name="runledger.start_run")
def start_run(self: Task, run_id: str) -> str | None:
    """Execute a newly started run."""
    return _execute(self, run_id, "start")


@run_task(name="runledger.resume_run")
def resume_run(self: Task, run_id: str) -> str | None:
    """Resume a run from its ledger (after a crash, a settlement, or a raised budget)."""
    return _execute(self, run_id, "resume")


@shared_task(name="runledger.sweep")
def sweep() -> list[str]:
    """Re-queue runs whose worker lease expired, and runs whose message was lost (each is
    announced by its re-queue and sent to the resume task from there)."""
    # The workers' clock: the one a run's wake_at was written with.
    return sweeping.runs_sweep(clock=faultpoints.clock())


@shared_task(name="runledger.schedules")
def schedules() -> list[str]:
    """Start the runs of the schedules' due ticks (each announced by its start, and sent to
    the start task from there); the runs' ids. On the clock the equipment may have set."""
    from ledger.processes import schedules as scheduling

    return scheduling.schedules_tick(clock=faultpoints.clock())


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


def send_start(run_id: str, *, eta: datetime | None = None) -> None:
    """Send start_run now (the receiver of ``run_queued`` calls it after the commit), or for
    delivery at ``eta`` (a delayed start, ``start_at``)."""
    _send(start_run, run_id, eta=eta)


def send_starts(run_ids: list[str]) -> None:
    """Send a batch start's runs to the workers as one message (``start_runs``, the receiver of
    ``runs_queued`` calls it after the commit): one publish for up to 1,000 runs, measured at
    ~600 runs/s when each run was its own message against thousands per second this way
    (``manage.py bench_starts``). A worker fans it out (``start_runs``)."""
    try:
        start_runs.delay(list(run_ids))
    except Exception:
        # The runs stay queued in the ledger; the sweep enqueues them again once they look lost.
        log.exception("could not enqueue a batch of %d runs; the sweep will retry", len(run_ids))


@shared_task(name="runledger.start_runs")
def start_runs(run_ids: list[str]) -> int:
    """Fan a batch start's message out into one ``start_run`` message per run, published
    here over one producer, so the request that started them published once. Lost (a worker
    killed mid-way), the unsent runs stay queued in the ledger and the sweep sends them again
    (RUNLEDGER_REQUEUE_QUEUED_AFTER_SECONDS). The number of messages sent."""
    if not isinstance(run_ids, list) or not all(isinstance(r, str) for r in run_ids):
        log.error("start_runs: %r is not a list of run ids; nothing sent", run_ids)
        return 0
    sent = 0
    try:
        with start_run.app.producer_or_acquire() as producer:
            for run_id in run_ids:
                start_run.apply_async((run_id,), producer=producer)
                sent += 1
    except Exception:
        log.exception(
            "start_runs: could not enqueue %d of %d runs; the sweep will send them again",
            len(run_ids) - sent,
            len(run_ids),
        )
    return sent


def send_resume(run_id: str, *, eta: datetime | None = None, recovered: bool = False) -> None:
    """Send resume_run now (the receiver of ``run_queued`` calls it after the commit), or for
    delivery at ``eta`` (a run waiting out a retry's back-off; a Celery countdown); a
    ``recovered`` run (the sweep's, a handed-back one) to RUNLEDGER_RECOVERED_QUEUE, which the
    workers take from in turn with the backlog's queue."""
    from django.conf import settings

    queue = settings.RUNLEDGER_RECOVERED_QUEUE if recovered else None
    _send(resume_run, run_id, eta=eta, queue=queue)


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


def _send(
    task: Task, run_id: str, *, eta: datetime | None = None, queue: str | None = None
) -> None:
    try:
        if eta is None and queue is None:
            task.delay(run_id)
        else:
            options: dict[str, Any] = {}
            if eta is not None:
                options["eta"] = eta
            if queue is not None:
                options["queue"] = queue
            task.apply_async((run_id,), **options)
    except Exception:
        # The run stays queued in the ledger; the sweep enqueues it again once it looks lost.
        log.exception("could not enqueue %s for run %s; the sweep will retry", task.name, run_id)


@shared_task(name="runledger.notifications")
def notifications() -> int:
    """Queue reminders for long waits, then deliver every due notification (beat runs it every
    RUNLEDGER_NOTIFY_EVERY_SECONDS; an event also sends it after its commit)."""
    transitions.notifications_remind(now=timezone.now())
    return sum(1 for d in delivery.deliver_due() if d.ok)


@shared_task(name="runledger.alerts")
def alerts() -> int:
    """Evaluate the alert rules (open, keep, resolve their incidents), then deliver every due
    page and notification (beat runs it every RUNLEDGER_ALERT_EVERY_SECONDS)."""
    alerting.alerts_evaluate()
    return sum(1 for d in delivery.deliver_due() if d.ok)


@receiver(notifications_queued)
def _deliver_soon(sender: object, **kwargs: object) -> None:
    try:
        notifications.delay()
    except Exception:
        log.exception("could not enqueue the notification delivery; beat delivers them")
