"""Faults beyond SIGKILL, on real Celery workers (issue 14, item 4): the workers' PostgreSQL
connection cut by a proxy just before, during and just after each commit of each effect step.

The other faults are in files of their own, so that `make test`'s processes share them:
PostgreSQL and Redis restarted under runs (test_faults_restarts.py), a step write refused by the
database (test_faults_refused_writes.py). Every test waits on conditions with generous
timeouts, never a fixed sleep.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from django.db import connection

from harness import killtest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


def _report_failures(report: killtest.Report, seed: int) -> str:
    return f"seed={seed}\n" + "\n".join(
        f"{t.describe()}\n  " + "\n  ".join(t.problems) for t in report.failures
    )


def test_a_cut_database_connection_at_every_commit_of_every_effect_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    """Before (not committed), during (committed, the answer lost) and after (committed and
    answered) each effect's intent and result write: the run recovers through the sweep with
    the uninterrupted result, each effect happened exactly once (or, for the notifier with no
    read path, the run waits for a person and the notification is not repeated)."""
    seed = random.SystemRandom().randrange(1_000_000)
    fixed = [t for t in killtest.plan(200, seed, ("cut",)) if t.mode == "cut"]
    chosen = fixed[: sum(len(killtest.commit_points(s)) for s in killtest.SCENARIOS)]
    assert {(t.scenario.name, t.point) for t in chosen} == {
        (s.name, p) for s in killtest.SCENARIOS for p in killtest.commit_points(s)
    }
    report = killtest.run(trials=len(chosen), seed=seed, root=tmp_path, chosen=chosen)
    connection.close()
    print(report.recovery_line())
    print(report.summary_line())
    assert not report.failures, _report_failures(report, seed)
    assert report.faulted("cut") == len(chosen)
    # Cut during the notifier's intent, or before its result: nobody can know; a person settles.
    assert report.count("blocked") >= 2
