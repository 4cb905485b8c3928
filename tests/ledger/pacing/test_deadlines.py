"""Deadlines on a fake clock: a run past its deadline stops before its next step, failed with
reason ``deadline`` (its completion event says so); an effect left started by a crash is looked
up first, as a resume would, and never sent twice; a queued run past it is failed by the sweep;
bad deadlines are refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledger import api, transitions
from ledger.models import Execution, Notification, Run, RunStatus, Step
from ledger.processes.execute import run_execute
from ledger.processes.sweep import runs_sweep
from tests.support import paced_agents
from tests.support.paced_agents import CLOCK, SENT, Crash

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fake_clock() -> None:
    CLOCK["now"] = T0
    SENT.clear()


def clock() -> datetime:
    return CLOCK["now"]


def _start(inputs: dict, webhooks: list | None = None, **pace: object) -> str:
    started = transitions.run_start_once(
        agent="paced-steps",
        inputs=inputs,
        pace=transitions.Pace(**pace),
        webhooks=webhooks,
        clock=clock,
    )
    return started.run.run_id


def _execute(run_id: str) -> object:
    return run_execute(run_id=run_id, worker="w1", heartbeat=False, clock=clock, lease_seconds=5)


def test_a_run_within_its_deadline_finishes() -> None:
    run_id = _start({"first": 30})
    assert Run.objects.get(pk=run_id).deadline_at == T0 + timedelta(seconds=60)  # the agent's
    outcome = _execute(run_id)
    assert outcome is not None and outcome.status == RunStatus.SUCCEEDED


def test_a_run_past_its_deadline_stops_before_its_next_step_and_says_so() -> None:
    hook = {"url": "https://app.example.com/hooks", "events": ["run.failed"]}
    run_id = _start({"first": 61}, webhooks=[hook])
    outcome = _execute(run_id)
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", "deadline")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.reason) == (RunStatus.FAILED, "deadline")
    assert "stopped at its deadline before step 'send'" in run.error
    assert not SENT  # the effect after the deadline was never sent
    assert list(Step.objects.filter(run_id=run_id).values_list("step_id", flat=True)) == ["first"]
    assert Execution.objects.get(run_id=run_id).reason == "deadline"
    event = Notification.objects.get(run_id=run_id)
    assert event.kind == "run.failed" and event.payload["data"]["reason"] == "deadline"


def test_an_effect_in_flight_at_the_deadline_is_looked_up_and_never_sent_twice() -> None:
    run_id = _start({"crash": True})
    with pytest.raises(Crash):
        _execute(run_id)  # the worker dies inside the effect; the clock passes the deadline
    assert Step.objects.get(run_id=run_id, step_id="send").status == "started"
    outcome = _execute(run_id)  # another worker, after the lease expired
    assert outcome is not None and (outcome.status, outcome.reason) == ("failed", "deadline")
    send = Step.objects.get(run_id=run_id, step_id="send")
    assert send.status == "succeeded" and send.result == {"sent": send.effect_key}  # looked up
    assert {send.effect_key: 1} == SENT  # sent once
    assert "started effects" in Run.objects.get(pk=run_id).error


def test_a_start_gives_its_own_deadline_in_seconds_or_as_a_time() -> None:
    assert Run.objects.get(pk=_start({}, deadline=5)).deadline_at == T0 + timedelta(seconds=5)
    at = T0 + timedelta(hours=2)
    assert Run.objects.get(pk=_start({}, deadline=at)).deadline_at == at
    later = T0 + timedelta(minutes=10)
    delayed = _start({}, deadline=5, start_at=later)  # seconds count from its start time
    assert Run.objects.get(pk=delayed).deadline_at == later + timedelta(seconds=5)


def test_the_sweep_fails_a_queued_run_past_its_deadline() -> None:
    run_id = _start({}, deadline=5)
    kept = _start({}, deadline=3600)
    CLOCK["now"] = T0 + timedelta(seconds=6)
    runs_sweep(clock=clock)
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.reason) == (RunStatus.FAILED, "deadline") and run.finished_at
    assert Run.objects.get(pk=kept).status == RunStatus.QUEUED
    assert _execute(run_id) is None  # nothing left to execute


@pytest.mark.parametrize(
    "deadline", [0, -5, T0 - timedelta(seconds=1), datetime(2026, 12, 4), "soon", True]
)
def test_a_bad_deadline_is_refused_and_nothing_is_written(deadline: object) -> None:
    with pytest.raises(api.InvalidInput, match="deadline"):
        _start({}, deadline=deadline)
    with pytest.raises(api.BatchRefused):
        transitions.run_start_many([{"agent": "paced-steps", "deadline": deadline}], clock=clock)
    assert not Run.objects.exists()


def test_an_agent_deadline_that_is_not_seconds_is_refused_at_definition() -> None:
    from ledger import registry
    from ledger.errors import AgentDefinitionError

    with pytest.raises(AgentDefinitionError):
        registry.agent("paced-bad-deadline", deadline=0)(lambda ctx, inputs: None)
    assert paced_agents.paced_steps.deadline == 60
