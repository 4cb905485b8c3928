"""Signals the ledger sends, for the project around it to act on (``ledger`` never imports
``runs``: the workers connect here instead of the ledger calling them).

``run_queued``: the ledger itself queued a run that no caller knows about, so nobody else will
enqueue it. Today that is the continuation of ``ctx.continue_as_new`` (``cause="continue"``).
Runs queued by a caller — ``transitions.run_start``, ``transitions.run_resume``, the operator
functions (which take ``on_commit=``) — do not send it: their callers enqueue them.

Sent after the commit that queued the run (``transaction.on_commit``), with ``run_id`` and
``cause``. A receiver that raises is logged, not propagated: the run stays queued for the next
receiver or sweep. The workers connect it to their start task::

    from ledger.signals import run_queued

    @receiver(run_queued)
    def _enqueue(sender, run_id, cause, **kwargs):
        start_run.delay(run_id)
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.dispatch import Signal

log = logging.getLogger(__name__)

run_queued = Signal()


def send_run_queued_on_commit(*, run_id: str, cause: str) -> None:
    """Send ``run_queued`` once the current transaction commits (never if it rolls back)."""

    def send() -> None:
        for receiver, answer in run_queued.send_robust(sender=None, run_id=run_id, cause=cause):
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
