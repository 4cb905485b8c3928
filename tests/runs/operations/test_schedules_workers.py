"""A schedule ticking every minute on a fake clock (RUNLEDGER_CLOCK_OFFSET_FILE), evaluated by
real processes on PostgreSQL: two beats send the schedules' pass, two worker processes take it;
the first is SIGKILLed mid-tick (its tick's run committed, the schedule not yet moved on: the
fault point ``schedule.after_start``) and started again. Every tick has exactly one run (read
from the database), and every run finishes."""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from harness.cluster import Cluster, wait_for
from ledger import schedules, transitions
from ledger.models import Run, Schedule
from tests.support import paced_agents  # noqa: F401 - registers the agents in this process too

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

WAIT = 120  # seconds any condition may take on a loaded machine before the test fails
TICKS = 5


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    env = {
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,tests.support.paced_agents",
        "RUNLEDGER_CLOCK_OFFSET_FILE": str(tmp_path / "offset"),
    }
    with Cluster(tmp_path, lease_seconds=3.0, sweep_seconds=0.3, lost_after=3600, env=env) as c:
        yield c
    connection.close()


class FakeClock:
    """The workers' clock: the real time plus the seconds in the offset file (read at each
    reading, by them and by this test)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("0")

    def __call__(self) -> datetime:
        return timezone.now() + timedelta(seconds=float(self.path.read_text() or 0))

    def move_to(self, at: datetime) -> None:
        self.path.write_text(repr((at - timezone.now()).total_seconds()))


def _schedule(schedule_id: str) -> Schedule:
    return Schedule.objects.get(pk=schedule_id)


def test_two_beats_and_a_pass_killed_mid_tick_start_exactly_one_run_per_tick(
    cluster: Cluster, tmp_path: Path
) -> None:
    clock = FakeClock(tmp_path / "offset")
    made = transitions.schedule_add(
        name="every-minute",
        agent="paced-free",
        inputs={"seconds": 0},
        interval=60,
        missed="each",
        by="cli:test",
        clock=clock,
    )
    sid, first = made.schedule_id, made.next_at
    mark = tmp_path / "killed"
    doomed = cluster.worker(
        "doomed",
        env={
            "RUNLEDGER_KILL_AT": "schedule.after_start",
            "RUNLEDGER_KILL_SCOPE": "group",  # the whole process, parent and pool
            "RUNLEDGER_KILL_MARK": str(mark),
        },
    )
    cluster.beat("beat-1")
    cluster.beat("beat-2")
    clock.move_to(first + timedelta(seconds=1))  # the first tick is due
    assert wait_for(lambda: mark.exists() and doomed.poll() is not None, timeout=WAIT), cluster.log(
        "doomed"
    )
    assert doomed.returncode == -signal.SIGKILL
    # Killed mid-tick: the first tick's run is in the ledger, the schedule did not move on.
    assert Run.objects.filter(schedule=sid).count() == 1
    assert _schedule(sid).next_at == first
    cluster.worker("restarted")  # the same worker started again, and a second one beside it
    cluster.worker("second")
    for n in range(1, TICKS):
        tick = first + timedelta(minutes=n)
        assert wait_for(lambda t=tick: _schedule(sid).next_at >= t, timeout=WAIT), cluster.log(
            "restarted"
        ) + cluster.log("second")
        clock.move_to(tick + timedelta(seconds=1))
    last = first + timedelta(minutes=TICKS - 1)
    assert wait_for(lambda: _schedule(sid).next_at > last, timeout=WAIT), cluster.log("second")
    due = [first + timedelta(minutes=n) for n in range(TICKS)]
    keys = Counter(Run.objects.filter(schedule=sid).values_list("idempotency_key", flat=True))
    assert keys == Counter(schedules.tick_key(sid, t) for t in due), keys
    # Every tick's run was sent to a worker and finished (the killed pass's too).
    runs = Run.objects.filter(schedule=sid)
    assert wait_for(lambda: runs.filter(status="succeeded").count() == TICKS, timeout=WAIT), list(
        runs.values_list("status", flat=True)
    )
