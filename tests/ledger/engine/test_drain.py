"""Draining (issue 24, rolling deploys): once the worker process is asked to stop, a run about
to execute its next step is handed back — its steps so far committed, its lease released, queued
again and announced — and the next worker replays what was done and goes on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ledger import registry, transitions
from ledger.agents import RunContext, agent, tool
from ledger.engine import drain
from ledger.errors import LeaseLost
from ledger.models import Run, Step
from tests.support.announcements import recording

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

CALLS: list[str] = []


@tool(kind="read", name="drain-first")
def first(n: int) -> int:
    CALLS.append("first")
    drain.request()  # SIGTERM arrives while this step executes
    return n + 1


@tool(kind="read", name="drain-second")
def second(n: int) -> int:
    CALLS.append("second")
    return n * 2


@pytest.fixture(autouse=True)
def draining_agent() -> Iterator[None]:
    @agent("drain-agent", tools=[first, second])
    def drain_agent(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
        a = ctx.call(first, step="a", n=inputs["n"])
        try:
            b = ctx.call(second, step="b", n=a)
        except Exception:  # an agent's own catch-all cannot swallow the hand back
            b = -1
        return {"b": b}

    CALLS.clear()
    drain.clear()
    yield
    drain.clear()
    registry.unregister_agent("drain-agent")


def test_a_draining_worker_hands_the_run_back_before_its_next_step(execute) -> None:
    run = transitions.run_start(agent="drain-agent", inputs={"n": 1})
    with recording(with_starts=False) as announced:
        outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == ("queued", "handback", "b")
    run.refresh_from_db()
    assert (run.status, run.lease_token, run.lease_owner) == ("queued", None, "")
    assert "handed back before step 'b'" in run.detail
    assert announced.seen == [(run.run_id, "handback")]
    assert list(Step.objects.filter(run=run).values_list("step_id", "status")) == [
        ("a", "succeeded")
    ]
    assert CALLS == ["first"]

    drain.clear()  # the next worker (a new process) is not draining
    outcome = execute(run.run_id, worker="worker-2")
    assert (outcome.status, outcome.result, outcome.replayed, outcome.executed) == (
        "succeeded",
        {"b": 4},
        1,
        1,
    )
    assert CALLS == ["first", "second"]  # a was replayed, not executed again
    assert Run.objects.get(pk=run.run_id).executions == 2


def test_a_worker_that_lost_its_lease_hands_back_nothing(execute) -> None:
    run = transitions.run_start(agent="drain-agent", inputs={"n": 1})
    token = transitions.lease_claim(run_id=run.run_id, owner="w")
    assert token is not None
    transitions.run_cancel(run_id=run.run_id, by="test", reason="cancel", seen_version=None)
    with pytest.raises(LeaseLost):
        transitions.run_hand_back(run_id=run.run_id, token=token, step_id="b")
    assert Run.objects.get(pk=run.run_id).status == "cancelled"
