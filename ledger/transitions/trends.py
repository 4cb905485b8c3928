"""Folding the trend deltas (appended by ``ledger_run``'s triggers, migration
``0019_run_trends``) into the hourly totals the Trends page reads.

Exact under concurrency, as ``counts.fold_status_counts``: one statement deletes the deltas it
folds and adds them to the totals, so a reader (one statement over totals plus deltas, one
snapshot) sees every change once. PostgreSQL only; elsewhere a no-op.
"""

from __future__ import annotations

from ledger.transitions.counts import run_fold

FOLD = """
WITH moved AS (DELETE FROM ledger_runtrenddelta RETURNING hour, team, agent, status, bucket, n),
     sums AS (SELECT hour, team, agent, status, bucket, sum(n) AS n FROM moved
              GROUP BY hour, team, agent, status, bucket)
INSERT INTO ledger_runtrendhour (hour, team, agent, status, bucket, n)
    SELECT hour, team, agent, status, bucket, n FROM sums
ON CONFLICT (hour, team, agent, status, bucket)
    DO UPDATE SET n = ledger_runtrendhour.n + EXCLUDED.n
"""


def fold_trends() -> int:
    """Fold the pending trend deltas into the hourly totals; the number of hour rows touched."""
    return run_fold(FOLD)
