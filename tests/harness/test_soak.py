"""The shortened soak inside `make test`: SOAK_CI_TRIALS (default 24) trials mixing SIGKILL at
crash points and at random, SIGSTOP zombies and database connection cuts, dealt to the
filesystem broker and a private Redis: each fault family four times on each broker, the kills
and the zombies at the approved refund's crash points up to its notification (sent, then the
worker killed or frozen: a resume that sent it again would show). `make soak` runs the same
with 1,000 trials.

Every crash point under SIGKILL is `test_killtest.py`'s, every commit under a connection cut
`test_faults.py`'s; this one proves the families mixed, on both brokers, with zombies woken.
"""

from __future__ import annotations

import os
import random
import shutil

import pytest
from django.db import connection

from harness import killtest, soak

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


def test_a_short_soak_of_mixed_faults_on_two_brokers_is_exact(tmp_path) -> None:
    trials = int(os.environ.get("SOAK_CI_TRIALS", "24"))
    seed = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(1_000_000))
    brokers = soak.BROKERS if shutil.which("redis-server") else ("filesystem",)
    report = soak.run(trials=trials, seed=seed, root=tmp_path, budget_seconds=900, brokers=brokers)
    connection.close()
    print(report.recovery_line())
    print(report.soak_line())
    failures = "\n".join(f"{t.describe()}\n  " + "\n  ".join(t.problems) for t in report.failures)
    assert not report.failures, f"seed={seed}\n{failures}"
    assert len(report.trials) == trials  # the budget is far above what 24 trials need
    assert report.kills > 0 and report.faulted("stop") > 0 and report.faulted("cut") > 0
    assert {t.fault for t in report.trials} == set(killtest.FAULTS)
    # The plan alternates the families and deals the trials alternately to the brokers: every
    # family met every broker (soak.run's dealing: trial i on brokers[i % len(brokers)]).
    for number, _ in enumerate(brokers):
        dealt = [t for t in report.trials if t.index % len(brokers) == number]
        assert {t.fault for t in dealt} == set(killtest.FAULTS), brokers[number]
    assert report.count("mismatch") == report.count("duplicate") == report.count("lost") == 0
    assert report.count("stuck") == 0
