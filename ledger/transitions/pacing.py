"""The claim of a run with a concurrency key (``ledger.pacing``): at most ``limit`` runs of one
key execute at once across the fleet, decided by PostgreSQL, never by a process's memory.

A keyed claim takes a transaction-scoped advisory lock on the key (claims of one key are
serialized; other keys and plain runs are not touched), fences the key's runs whose lease
expired (as the sweep would: their worker died, so their slot is free within the lease bound,
and a worker that wakes up later can write nothing), counts the key's running runs and claims
only under the limit. A run whose key is full stays queued and holds no worker: its detail says
why, and it is offered again when a slot frees (``slots_offer``, called by the worker
whose run left the slot) or by the sweep's re-queue of runs untouched in the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from ledger import signals
from ledger.conf import conf
from ledger.models import ACTIVE_STATUSES, Reason, Run, RunStatus
from ledger.pacing import waiting_detail
from ledger.selectors import ExpiredLease
from ledger.signatures import signature_of
from ledger.transitions import notify

Clock = Callable[[], datetime]


def keyed_claim(
    *,
    run_id: str,
    key: str,
    limit: int,
    claim: Callable[[], str | None],
    clock: Clock = timezone.now,
) -> str | None:
    """``claim()`` (the plain compare-and-set) if the key has a free slot, in one transaction
    holding the key's advisory lock; None when the key is full (the run's detail then says so)
    or the claim's compare-and-set refused."""
    from ledger.transitions.lifecycle import run_requeue_expired

    with transaction.atomic():
        _lock_key(key)
        now = clock()
        running = Run.objects.filter(concurrency_key=key, status=RunStatus.RUNNING).exclude(
            pk=run_id
        )
        expired = running.filter(Q(lease_expires_at__lt=now) | Q(lease_token__isnull=True))
        for rid, token, owner, expires in expired.values_list(
            "run_id", "lease_token", "lease_owner", "lease_expires_at"
        ):
            # The dead worker's slot: fenced and re-queued now, not at the sweep's next pass.
            run_requeue_expired(lease=ExpiredLease(rid, token, owner, expires), clock=clock)
        busy = running.count()
        if busy >= max(limit, 1):
            detail = waiting_detail(key=key, running=busy, limit=limit)
            Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).exclude(detail=detail).update(
                detail=detail, updated_at=now
            )
            return None
        return claim()


#: The claim's condition that no queued run outranks this one (PostgreSQL): a run of higher
#: priority, due, that was started less than ``aging`` seconds per level between them after
#: this one. So a priority-5 run started behind 100 queued ones is claimed next, and a
#: priority-0 run that waited 5 minutes (at 60 s aging) goes before one of priority 5 started
#: just now: none starves. Probed through ``run_priority_queued``, a partial index that holds
#: only queued runs of priority above 0 (empty, and free, when nobody uses priority).
NOT_OUTRANKED = """NOT (ledger_run.status = 'queued' AND EXISTS (
    SELECT 1 FROM ledger_run o
     WHERE o.status = 'queued' AND o.priority > 0 AND o.priority > ledger_run.priority
       AND o.run_id <> ledger_run.run_id AND (o.wake_at IS NULL OR o.wake_at <= %s)
       AND o.created_at < ledger_run.created_at
           + (o.priority - ledger_run.priority) * make_interval(secs => %s)))"""

#: The queued runs that outrank run %s (as ``NOT_OUTRANKED`` judges), best first.
OUTRANKING = """
SELECT o.run_id FROM ledger_run o JOIN ledger_run x ON x.run_id = %s
 WHERE x.status = 'queued' AND o.status = 'queued' AND o.priority > 0
   AND o.priority > x.priority AND o.run_id <> x.run_id
   AND (o.wake_at IS NULL OR o.wake_at <= %s)
   AND o.created_at < x.created_at + (o.priority - x.priority) * make_interval(secs => %s)
 ORDER BY o.priority DESC, o.created_at LIMIT 3"""


def ranked(runs: QuerySet[Run], *, now: datetime) -> QuerySet[Run]:
    """``runs`` less the queued ones that another queued run outranks (PostgreSQL only)."""
    if connection.vendor != "postgresql":
        return runs
    return runs.extra(where=[NOT_OUTRANKED], params=[now, conf.RUNLEDGER_PRIORITY_AGING_SECONDS])


def outranking(*, run_id: str, now: datetime) -> list[str]:
    """The queued runs that outrank ``run_id`` (a queued run), best first; [] elsewhere."""
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(OUTRANKING, [run_id, now, conf.RUNLEDGER_PRIORITY_AGING_SECONDS])
        return [row[0] for row in cursor.fetchall()]


def _lock_key(key: str) -> None:
    """Serialize the claims of one key (PostgreSQL; SQLite's one writer serializes anyway)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"runledger.key:{key}"]
        )


def slots_offer(*, key: str, limit: int, clock: Clock = timezone.now) -> list[str]:
    """Announce the queued runs of ``key`` that the slots free now may take, oldest first
    (``signals.run_queued``, cause ``slot``, after the current transaction commits); their ids.
    Called by the worker whose run left a slot. Writes nothing: the claim decides, and one
    announcement too many costs a refused claim."""
    ids = _for_free_slots(key=key, limit=limit, now=clock())
    for run_id in ids:
        signals.send_run_queued_on_commit(run_id=run_id, cause="slot")
    return ids


def _for_free_slots(*, key: str, limit: int, now: datetime) -> list[str]:
    busy = Run.objects.filter(concurrency_key=key, status=RunStatus.RUNNING).count()
    free = max(limit, 1) - busy
    if free <= 0:
        return []
    queued = (
        Run.objects.filter(concurrency_key=key, status__in=ACTIVE_STATUSES[:1])
        .filter(Q(wake_at__isnull=True) | Q(wake_at__lte=now))
        .order_by("created_at")
        .values_list("run_id", flat=True)[:free]
    )
    return list(queued)


def runs_fail_past_deadline(*, clock: Clock = timezone.now, limit: int = 100) -> list[str]:
    """Fail the queued runs whose deadline passed while no worker executed them (held by a
    full concurrency key, or never sent): failed with reason ``deadline``, each in its own
    compare-and-set on ``queued``, with its completion event. The sweep calls it; a running
    run meets its deadline at its next step instead. The ids failed."""
    now = clock()
    due = Run.objects.filter(
        status=RunStatus.QUEUED, deadline_at__isnull=False, deadline_at__lte=now
    ).values_list("run_id", "deadline_at")[:limit]
    failed = []
    for run_id, deadline_at in list(due):
        error = f"deadline {deadline_at:%Y-%m-%d %H:%M:%S %Z} passed while it was queued"
        with transaction.atomic():
            done = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
                status=RunStatus.FAILED,
                reason=Reason.DEADLINE,
                error=error,
                signature=signature_of(error),
                cause_step="",
                detail="",
                wake_at=None,
                updated_at=now,
                status_changed_at=now,
                finished_at=now,
                version=F("version") + 1,
            )
            if done == 1:
                notify.notify_run_event(run_id=run_id, at=now)
                failed.append(run_id)
    return failed
