"""The sweep: recover the runs of workers that died (an expired lease) and of messages that were
lost (a run queued too long with no worker). Celery beat runs it (``runledger.sweep``); the
caller enqueues the run ids it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

from ledger import observe, selectors, transitions
from ledger.conf import conf
from ledger.transitions.counts import fold_status_counts
from ledger.transitions.search import fold_search_words
from ledger.transitions.trends import fold_trends

Clock = Callable[[], datetime]


def runs_sweep(
    *, lost_after: float | None = None, clock: Clock = timezone.now, limit: int = 100
) -> list[str]:
    """One pass of the sweep; returns the runs that this caller must enqueue for a worker.

    Re-queues running runs whose lease expired (the worker died, froze, or lost its machine)
    and queued runs untouched for ``lost_after`` seconds (their message was lost); announces
    released runs whose ``wake_at`` came (a sleep, a wait, a back-off, a delayed start); queues runs
    whose question (``ctx.ask``) timed out unanswered, fails queued runs whose deadline passed
    (reason ``deadline``), and lifts the pauses whose expiry passed. Two
    sweepers at once each get a disjoint list: every re-queue is a compare-and-set.
    """
    wait = conf.RUNLEDGER_REQUEUE_QUEUED_AFTER_SECONDS if lost_after is None else lost_after
    ids = [
        lease.run_id
        for lease in selectors.runs_with_expired_leases(now=clock(), limit=limit)
        if transitions.run_requeue_expired(lease=lease, clock=clock)
    ]
    for run_id in ids:
        observe.emit("lease_expired", run_id=run_id)
    for run_id in transitions.runs_fail_past_deadline(clock=clock, limit=limit):
        observe.emit("run_deadline", run_id=run_id)
    for run_id, seen_at in selectors.runs_due_to_wake(now=clock(), limit=limit):
        if transitions.run_wake_due(run_id=run_id, seen_at=seen_at, clock=clock):
            ids.append(run_id)  # a sleep, a wait or a back-off is over: its message may be lost
    for run_id, seen_at in selectors.runs_lost_in_queue(older_than=wait, now=clock(), limit=limit):
        if transitions.run_requeue_lost(run_id=run_id, seen_at=seen_at, clock=clock):
            ids.append(run_id)
    for run_id in selectors.questions_timed_out(now=clock(), limit=limit):
        if transitions.question_timeout(run_id=run_id, clock=clock):
            ids.append(run_id)  # ctx.ask's timeout passed unanswered: it returns its default
    for pause_id in transitions.pauses_expire(clock=clock):
        observe.emit("pause_expired", pause=pause_id)  # its held runs are queued (announced)
    # The runs-per-status deltas since the last pass, folded into the totals the dashboard reads.
    fold_status_counts()
    fold_trends()  # and the Trends page's hourly totals
    fold_search_words()  # and the effect and failed steps' words into their runs' search text
    transitions.beacon_beat(name="sweep", detail={"requeued": len(ids)}, clock=clock)
    observe.emit("sweep", requeued=len(ids))
    return ids
