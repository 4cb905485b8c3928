"""Priority: a queued run of higher priority is claimed before older ones of lower priority;
aging keeps the low ones from starving (RUNLEDGER_PRIORITY_AGING_SECONDS). On PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from ledger import api, transitions
from ledger.models import Run, RunStatus
from ledger.processes.execute import run_execute
from tests.support import paced_agents  # noqa: F401 - registers the agents
from tests.support.announcements import recording

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


def _started(priority: int | None = None, **options: object) -> str:
    return api.start_run("paced-free", {"seconds": 0}, priority=priority, **options).run_id  # type: ignore[arg-type]


def _created(run_id: str, at: object) -> None:
    with connection.cursor() as cursor:  # the test's clock: the run was started then
        cursor.execute("UPDATE ledger_run SET created_at = %s WHERE run_id = %s", [at, run_id])


def test_a_high_priority_run_started_behind_many_is_taken_next() -> None:
    backlog = [_started() for _ in range(100)]
    urgent = _started(priority=5)
    assert transitions.lease_claim(run_id=backlog[0], owner="w1") is None  # outranked
    with recording(with_starts=False) as heard:
        outcome = run_execute(run_id=backlog[0], worker="w1", heartbeat=False)
    assert outcome is not None and outcome.run_id == urgent
    assert Run.objects.get(pk=urgent).status == RunStatus.SUCCEEDED
    assert Run.objects.get(pk=backlog[0]).status == RunStatus.QUEUED
    assert heard.seen == [(backlog[0], "outranked")]  # sent again, ahead of the backlog
    # Nothing outranks the backlog now: its runs are claimed as they come.
    assert transitions.lease_claim(run_id=backlog[0], owner="w1") is not None


def test_a_low_priority_run_that_waited_long_enough_is_not_outranked() -> None:
    now = timezone.now()
    old = _started()
    fresh = _started(priority=5)
    _created(old, now - timedelta(seconds=5 * 60 + 1))  # 5 levels at 60 s aging
    _created(fresh, now)
    assert transitions.lease_claim(run_id=old, owner="w1", clock=lambda: now) is not None
    recent = _started()
    _created(recent, now - timedelta(seconds=4 * 60))  # not yet: one level short
    assert transitions.lease_claim(run_id=recent, owner="w1", clock=lambda: now) is None


def test_equal_priorities_and_runs_without_priority_are_claimed_as_before() -> None:
    a, b = _started(priority=3), _started(priority=3)
    assert transitions.lease_claim(run_id=b, owner="w1") is not None
    assert transitions.lease_claim(run_id=a, owner="w2") is not None
    plain = [_started() for _ in range(3)]
    assert all(transitions.lease_claim(run_id=r, owner="w") is not None for r in plain)


def test_an_urgent_run_held_by_its_key_does_not_block_others() -> None:
    keyed = _started(priority=9, concurrency_key="k")
    holder = _started(priority=9, concurrency_key="k")
    assert transitions.lease_claim(run_id=holder, owner="w0", ranked=False) is not None
    low = _started()
    # The urgent run outranks it but cannot be claimed (its key is full): the low one runs.
    outcome = run_execute(run_id=low, worker="w1", heartbeat=False)
    assert outcome is not None and outcome.run_id == low
    assert Run.objects.get(pk=keyed).status == RunStatus.QUEUED


@pytest.mark.parametrize("priority", [-1, 10, True, "high"])
def test_a_priority_out_of_range_is_refused_and_nothing_is_written(priority: object) -> None:
    with pytest.raises(api.InvalidInput, match="priority"):
        api.start_run("paced-free", {}, priority=priority)  # type: ignore[arg-type]
    assert not Run.objects.exists()
