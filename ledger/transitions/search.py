"""Folding the step words of the word search (appended by ``ledger_step``'s triggers to
``ledger_runsearchdelta``, migration ``0018_run_search``) into ``ledger_run.search_steps``.

One statement per batch: it locks the runs that have words waiting (``SKIP LOCKED``: a run whose
row a worker or an operator holds is folded on the next pass, so the sweep never waits on a
step), deletes their words and appends each fragment the run does not hold yet, up to 4,000
characters. Words of runs that no longer exist (retention) are dropped. PostgreSQL only;
elsewhere a no-op (the search reads the step table itself there).
"""

from __future__ import annotations

import logging

from django.db import connection

from ledger.conf import conf
from ledger.transitions._common import LockRefused, bounded_lock_wait

log = logging.getLogger(__name__)

#: Runs folded by one statement; the sweep folds until none is left or a pass finds them held.
BATCH = 2000

FOLD = """
WITH target AS (
    SELECT r.run_id FROM ledger_run r
     WHERE r.run_id IN (SELECT DISTINCT run_id FROM ledger_runsearchdelta LIMIT %(batch)s)
     ORDER BY r.run_id
       FOR NO KEY UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM ledger_runsearchdelta d USING target t WHERE d.run_id = t.run_id
    RETURNING d.id, d.run_id, d.words
), fresh AS (
    SELECT m.run_id, m.words, min(m.id) AS first
      FROM moved m JOIN ledger_run r ON r.run_id = m.run_id
     WHERE strpos(r.search_steps, m.words) = 0
     GROUP BY m.run_id, m.words
), joined AS (
    SELECT run_id, string_agg(' ' || words, '' ORDER BY first) AS words FROM fresh GROUP BY run_id
), grown AS (
    UPDATE ledger_run r SET search_steps = left(r.search_steps || j.words, 4000)
      FROM joined j
     WHERE r.run_id = j.run_id AND length(r.search_steps) < 4000
    RETURNING 1
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM grown)
"""

ORPHANS = """
DELETE FROM ledger_runsearchdelta d
 WHERE NOT EXISTS (SELECT 1 FROM ledger_run r WHERE r.run_id = d.run_id)
"""


def fold_search_words(*, passes: int = 50) -> int:
    """Fold the waiting step words into their runs; the number of runs whose text grew."""
    if connection.vendor != "postgresql":
        return 0
    grown = 0
    wait = conf.RUNLEDGER_SWEEP_LOCK_WAIT_SECONDS
    try:
        for _ in range(passes):
            with bounded_lock_wait(wait), connection.cursor() as cur:
                cur.execute(FOLD, {"batch": BATCH})
                moved, n = cur.fetchone()
                grown += n
                if moved == 0:
                    # Nothing moved: no words wait, or their runs are held (next pass) or gone.
                    cur.execute(ORPHANS)
                    break
    except LockRefused as exc:  # a frozen fold holds words: the next pass takes them
        log.warning("search words fold stopped: another session holds its rows (%s)", exc)
    return grown
