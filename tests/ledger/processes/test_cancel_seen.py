"""A cancel the agent sees, in one process on PostgreSQL: the lease renewer hears the cancel's
commit (NOTIFY) while a tool runs, ``ctx.cancelled`` turns True, and the agent's next step does
not execute: it raises ``RunCancelled``, and the execution ends ``cancelled`` with who and why
(the worker only adds its counts)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from harness.cluster import wait_for
from ledger import registry, transitions
from ledger.agents import agent, tool
from ledger.models import Execution, Step
from ledger.processes.execute import run_execute

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]

inside = threading.Event()
release = threading.Event()
seen: list[bool] = []
contexts: list[Any] = []
called: list[int] = []


@tool(kind="read", name="cancel-seen-step")
def step(n: int) -> int:
    called.append(n)
    return n


@agent("cancel-seen", tools=[step], max_resumes=0)
def cancel_seen(ctx: Any, inputs: Any) -> str:
    contexts.append(ctx)
    seen.append(ctx.cancelled)
    ctx.call(step, n=1)
    inside.set()
    release.wait(60)  # the agent's own work between two steps
    seen.append(ctx.cancelled)
    ctx.call(step, n=2)  # never executes: the run was cancelled
    return "finished"


def test_the_agent_sees_the_cancel_and_its_next_step_does_not_execute() -> None:
    run = transitions.run_start(agent="cancel-seen", inputs={})
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append(run_execute(run_id=run.run_id, worker="w1", lease_seconds=60.0))
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    try:
        assert inside.wait(60)
        transitions.run_cancel(
            run_id=run.run_id, by="cli:ops", reason="wrong customer", seen_version=None
        )
        # A 60 s lease beats every 20 s: only the cancel's NOTIFY makes this quick.
        assert wait_for(lambda: contexts[0].cancelled, timeout=10, interval=0.02)
    finally:
        release.set()
        thread.join(60)
        registry.unregister_agent("cancel-seen")
    assert seen == [False, True]
    assert called == [1]  # the step after the cancel never reached its tool
    assert outcome and outcome[0] is not None and outcome[0].status == "cancelled"
    recorded = Step.objects.filter(run=run).values_list("step_id", flat=True)
    assert list(recorded) == ["1.cancel-seen-step"]
    ex = Execution.objects.get(run=run, number=1)
    assert (ex.ending, ex.error) == ("cancelled", "cancelled by cli:ops: wrong customer")
    assert ex.executed == 1  # the worker's counts, added to the execution the cancel ended
