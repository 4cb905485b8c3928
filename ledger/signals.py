"""Signals the ledger sends, for the project around it to act on (``ledger`` never imports
``runs``: the workers connect here instead of the ledger calling them).

``run_queued`` is the one way a queued run reaches the workers. Every transition that queues a
run sends it after its commit (never if it rolls back), with ``run_id`` and ``cause``:

- ``start``: a new run (``transitions.run_start``); ``fork`` and ``clean``: a run made from
  another by a person; ``continue``: the continuation of ``ctx.continue_as_new``;
- ``resume``, ``retry``: a person resumed or retried a stopped run; ``settled`` and ``stale``:
  a settlement or a stale-step decision queued it (a bulk resume or retry is one of each);
- ``backoff``: a step's retry waits longer than a worker holds a run
  (RUNLEDGER_RETRY_SLEEP_MAX_SECONDS); the run is released and ``eta`` (a datetime, sent only
  with this cause) says when it is claimable: the message should be delivered then;
- ``recovery``: the sweep re-queued a run whose worker's lease expired, or whose message was
  lost; ``handback``: a stopping worker gave a running run back at a step boundary.

A batch start (``transitions.run_start_many``) queues many runs in one transaction and
announces them once, after its commit: ``runs_queued`` with ``run_ids`` (in order) and
``cause`` (``start``), then ``run_queued`` for each run with ``batched=True``. A receiver that
publishes (the workers') takes the batch from ``runs_queued`` (one publish, one broker
connection) and skips the ``batched`` announcements; one that only reads ``run_queued`` still
sees every run.

A receiver that raises is logged, not propagated: the run stays queued for the next receiver
or sweep. The workers connect it to their tasks (``runs.operations``)::

    @receiver(run_queued)
    def _enqueue(sender, run_id, cause, **kwargs):
        start_run.delay(run_id)

A caller that executes the run itself, in this process (a command's ``--inline``, a benchmark),
queues it inside ``with held():`` so that no worker is told about it too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

from django.db import transaction
from django.dispatch import Signal

log = logging.getLogger(__name__)

run_queued = Signal()
#: Many runs queued by one transaction (a batch start): ``run_ids``, ``cause``.
runs_queued = Signal()

#: The causes that make a new run (the workers start it) rather than resume one.
NEW_RUN_CAUSES = frozenset({"start", "fork", "clean", "continue"})

_held: ContextVar[bool] = ContextVar("runledger_run_queued_held", default=False)


@contextmanager
def held() -> Iterator[None]:
    """Runs queued inside the block are not announced: the caller executes them itself."""
    reset = _held.set(True)
    try:
        yield
    finally:
        _held.reset(reset)


def send_run_queued_on_commit(*, run_id: str, cause: str, eta: datetime | None = None) -> None:
    """Send ``run_queued`` once the current transaction commits (never if it rolls back).
    ``eta``: the run is not claimable before then (``backoff``); the message should wait too."""
    if _held.get():
        return
    extra = {"eta": eta} if eta is not None else {}

    def send() -> None:
        answers = run_queued.send_robust(sender=None, run_id=run_id, cause=cause, **extra)
        for receiver, answer in answers:
            if isinstance(answer, Exception):
                log.error(
                    "run %s was queued (%s) but the receiver %r failed: %r; it stays queued",
                    run_id,
                    cause,
                    receiver,
                    answer,
                )

    transaction.on_commit(send)


def send_runs_queued_on_commit(*, run_ids: list[str], cause: str) -> None:
    """Once the current transaction commits (never if it rolls back): ``runs_queued`` once with
    all of ``run_ids``, then ``run_queued`` for each with ``batched=True``."""
    if _held.get() or not run_ids:
        return
    ids = list(run_ids)

    def send() -> None:
        for receiver, answer in runs_queued.send_robust(sender=None, run_ids=ids, cause=cause):
            if isinstance(answer, Exception):
                log.error(
                    "%d runs were queued (%s) but the receiver %r failed: %r; they stay queued",
                    len(ids),
                    cause,
                    receiver,
                    answer,
                )
        for run_id in ids:
            for receiver, answer in run_queued.send_robust(
                sender=None, run_id=run_id, cause=cause, batched=True
            ):
                if isinstance(answer, Exception):
                    log.error(
                        "run %s was queued (%s) but the receiver %r failed: %r; it stays queued",
                        run_id,
                        cause,
                        receiver,
                        answer,
                    )

    transaction.on_commit(send)


#: Notifications were written to the outbox (sent after that commit): the workers connect it to
#: their delivery task, so a message goes out at once rather than on the next beat.
notifications_queued = Signal()


def send_notifications_queued_on_commit() -> None:
    def send() -> None:
        for receiver, answer in notifications_queued.send_robust(sender=None):
            if isinstance(answer, Exception):
                log.error("notification receiver %r failed: %r; beat delivers", receiver, answer)

    transaction.on_commit(send)
