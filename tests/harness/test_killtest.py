"""The kill test inside `make test`: real workers SIGKILLed mid-run, on PostgreSQL.

KILLTEST_CI_TRIALS trials (default: every crash point of every scenario, 34, and one kill from
outside at a random moment); KILLTEST_SEED replays a plan (each failure prints its seed and
trial). `make killtest` runs the same harness with 200 trials by default.
"""

from __future__ import annotations

import os
import random

import pytest
from django.db import connection

from harness import killtest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


def test_killed_workers_recover_with_the_same_result_and_no_repeated_effect(tmp_path) -> None:
    # The plan's fixed trials come first, then random ones: the first random one is external.
    every_point = sum(len(s.points) for s in killtest.SCENARIOS)
    trials = int(os.environ.get("KILLTEST_CI_TRIALS") or every_point + 1)
    seed = int(os.environ.get("KILLTEST_SEED") or random.SystemRandom().randrange(1_000_000))
    report = killtest.run(trials=trials, seed=seed, root=tmp_path)
    connection.close()
    print(report.recovery_line())
    print(report.summary_line())
    failures = "\n".join(f"{t.describe()}\n  " + "\n  ".join(t.problems) for t in report.failures)
    assert not report.failures, f"seed={seed}\n{failures}"
    # Every crash point of every scenario was hit, plus external kills at random moments.
    points = {(t.scenario.name, t.point) for t in report.trials}
    assert points >= {(s.name, p) for s in killtest.SCENARIOS for p in s.points}
    assert any(t.mode == "external" for t in report.trials)
    assert report.kills == len(report.trials) == trials
    assert report.count("mismatch") == report.count("duplicate") == report.count("lost") == 0
    assert report.count("blocked") >= 2  # notify.before_effect and notify.after_effect
