"""Folding the runs-per-status deltas (appended by ``ledger_run``'s triggers) into the totals.

Exact under concurrency: one statement deletes the deltas it folds and adds them to the
totals, so a reader (one statement over totals plus deltas, one snapshot) sees every change
exactly once, before or after the fold. Folding keeps the reader's work small: it is the sum of
a few dozen total rows and the deltas since the last fold. PostgreSQL only (see migration
``0016_status_counts``); elsewhere a no-op.
"""

from __future__ import annotations

import logging

from django.db import connection

from ledger.conf import conf
from ledger.transitions._common import LockRefused, bounded_lock_wait

log = logging.getLogger(__name__)

FOLD = """
WITH moved AS (DELETE FROM ledger_runstatusdelta RETURNING status, reason, n),
     sums AS (SELECT status, reason, sum(n) AS n FROM moved GROUP BY status, reason)
INSERT INTO ledger_runstatuscount (status, reason, n)
    SELECT status, reason, n FROM sums
ON CONFLICT (status, reason) DO UPDATE SET n = ledger_runstatuscount.n + EXCLUDED.n
"""


def run_fold(sql: str) -> int:
    """One fold statement in its own transaction (PostgreSQL only; elsewhere a no-op): the
    number of total rows it touched. Its lock waits are bounded (the sweep runs it): when
    another session holds the deltas or totals (a frozen sweep), this pass folds nothing and
    the next one folds them all."""
    if connection.vendor != "postgresql":
        return 0
    try:
        with bounded_lock_wait(conf.RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS), connection.cursor() as cur:
            cur.execute(sql)
            return max(cur.rowcount, 0)
    except LockRefused as exc:
        log.warning("fold skipped: another session holds its rows (%s)", exc)
        return 0


def fold_status_counts() -> int:
    """Fold the pending deltas into the totals; the number of (status, reason) rows touched."""
    return run_fold(FOLD)
