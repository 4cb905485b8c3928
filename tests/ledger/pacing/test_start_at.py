"""Delayed starts: ``start_at`` queues the run now and no worker executes it before then (a fake
clock); its message waits too; a time too far ahead, or not a time, is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from ledger import api, transitions
from ledger.models import Run, RunStatus
from ledger.processes.execute import run_execute
from tests.support import paced_agents  # noqa: F401 - registers the agents

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _start(start_at: object, *, clock=lambda: T0) -> Run:
    pace = transitions.Pace(start_at=start_at)  # type: ignore[arg-type]
    return transitions.run_start_once(
        agent="paced-free", inputs={"seconds": 0}, pace=pace, clock=clock
    ).run


def test_a_delayed_run_is_not_executed_before_its_time() -> None:
    run = _start(T0 + timedelta(minutes=10))
    assert run.status == RunStatus.QUEUED and run.wake_at == T0 + timedelta(minutes=10)
    assert run.detail.startswith("waiting to start at 2026-12-03 12:10:00")
    early = T0 + timedelta(minutes=9, seconds=59)
    assert run_execute(run_id=run.run_id, worker="w1", heartbeat=False, clock=lambda: early) is None
    assert Run.objects.get(pk=run.run_id).executions == 0
    due = T0 + timedelta(minutes=10)
    outcome = run_execute(run_id=run.run_id, worker="w1", heartbeat=False, clock=lambda: due)
    assert outcome is not None and outcome.status == RunStatus.SUCCEEDED
    done = Run.objects.get(pk=run.run_id)
    assert done.wake_at is None and done.resume_count == 0 and done.started_at == due


def test_its_message_waits_for_the_start_time() -> None:
    from ledger import signals
    from tests.support.announcements import Announcements

    heard = Announcements()
    etas: list[object] = []

    def receive(sender: object, run_id: str, cause: str, **kw: object) -> None:
        heard.receive(sender, run_id, cause)
        etas.append(kw.get("eta"))

    signals.run_queued.connect(receive, dispatch_uid="test-start-at")
    try:
        at = timezone.now() + timedelta(hours=1)
        handle = api.start_run("paced-free", {}, start_at=at)
        batch = api.start_runs([{"agent": "paced-free", "start_at": at}, {"agent": "paced-free"}])
    finally:
        signals.run_queued.disconnect(dispatch_uid="test-start-at")
    by_run = dict(zip(heard.ids, etas, strict=True))
    assert by_run[handle.run_id] == at and by_run[batch[0].run_id] == at
    assert by_run[batch[1].run_id] is None  # announced with the batch, at once


def test_a_start_time_in_the_past_starts_now() -> None:
    run = _start(T0 - timedelta(minutes=1))
    assert run.wake_at is None
    assert run_execute(run_id=run.run_id, worker="w1", heartbeat=False, clock=lambda: T0)


@pytest.mark.parametrize(
    "start_at",
    ["2026-12-03T14:00:00Z", datetime(2026, 12, 3, 14, 0), T0 + timedelta(days=400)],
)
def test_a_bad_start_time_is_refused_and_nothing_is_written(start_at: object) -> None:
    with pytest.raises(api.InvalidInput, match="start_at"):
        _start(start_at)
    with pytest.raises(api.BatchRefused):
        transitions.run_start_many(
            [{"agent": "paced-free", "start_at": start_at}], clock=lambda: T0
        )
    assert not Run.objects.exists()
