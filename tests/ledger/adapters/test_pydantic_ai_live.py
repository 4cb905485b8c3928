"""Live model text through the PydanticAI adapter (issue 33, item 4): an agent whose model
streams (a ``FunctionModel`` with a ``stream_function``) hands each piece of its answer to the
run's live readers while the model step executes — a piece is heard while the model is still
answering — and the step is recorded once, whole; a resume that replays the step asks the model
nothing and sends nothing. Sync and async ledger agents."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from django.db import connection
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from harness.cluster import wait_for
from ledger import faultpoints, registry, transitions, waiting
from ledger.adapters.pydantic_ai import run_agent
from ledger.agents import agent, tool
from ledger.models import Run, Step, StreamEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),  # NOTIFY carries the pieces
]
assert connection

WAIT = 120
PIECES = ["Refunded ", "inv_1001 ", "and inv_1003."]


@tool(kind="read", name="live_after")
def after(n: int) -> int:
    faultpoints.point("live.after")  # after the model's step: a crash here replays it
    return n


class Model:
    """A streaming model that stops after its first piece until ``go`` is set."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.asked = 0

    def whole(self, messages: list[Any], info: AgentInfo) -> ModelResponse:
        raise AssertionError("a streaming model step must not be asked at once")

    async def stream(self, messages: list[Any], info: AgentInfo) -> AsyncIterator[str]:
        self.asked += 1
        yield PIECES[0]
        await asyncio.to_thread(self.go.wait, WAIT)
        for piece in PIECES[1:]:
            yield piece


def register(name: str, model: Model, asynchronous: bool) -> None:
    helper = PydanticAgent(FunctionModel(model.whole, stream_function=model.stream))
    if asynchronous:

        async def body_async(ctx: Any, inputs: Any) -> Any:
            out = await run_agent(ctx, helper, "Refund inv_1001 and inv_1003.")
            await ctx.call(after, n=1, step="after")
            return out

        agent(name, tools=[after])(body_async)
    else:

        def body(ctx: Any, inputs: Any) -> Any:
            out = run_agent(ctx, helper, "Refund inv_1001 and inv_1003.")
            ctx.call(after, n=1, step="after")
            return out

        agent(name, tools=[after])(body)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_answer_is_heard_live_recorded_once_whole_and_not_sent_again_on_a_replay(
    asynchronous: bool, execute: Any, crash_at: Any
) -> None:
    name = f"pai-live-{'async' if asynchronous else 'sync'}"
    model = Model()
    register(name, model, asynchronous)
    heard: list[tuple[str, str]] = []
    try:
        run_id = transitions.run_start(agent=name, inputs={}).run_id
        stop = waiting.hear(run_id, lambda step_id, text: heard.append((step_id, text)))
        crash_at("live.after")
        worker = threading.Thread(target=lambda: execute(run_id, crash_expected=True), daemon=True)
        worker.start()
        try:
            assert wait_for(lambda: heard, timeout=WAIT)
            assert heard == [("agent.turn.1", PIECES[0])]
            # Heard while the model is still answering: its step is not recorded yet.
            assert not Step.objects.filter(run_id=run_id, step_id="agent.turn.1").exists()
        finally:
            model.go.set()
            worker.join(WAIT)
            connection.close()
        whole = "".join(PIECES)  # the rest may come joined: a publisher catching up joins
        assert wait_for(lambda: "".join(t for _s, t in heard) == whole, timeout=WAIT)
        first_execution = list(heard)

        outcome = execute(run_id)  # the resume replays the model's step
        stop()
    finally:
        registry.unregister_agent(name)

    assert outcome.status == "succeeded", outcome
    assert outcome.result == "".join(PIECES)
    assert model.asked == 1
    assert heard == first_execution  # nothing more from the replay
    assert {step_id for step_id, _text in heard} == {"agent.turn.1"}
    step = Step.objects.get(run_id=run_id, step_id="agent.turn.1")
    parts = step.result["response"]["parts"]
    assert (step.attempt, [p["content"] for p in parts]) == (1, ["".join(PIECES)])
    assert not StreamEvent.objects.filter(run_id=run_id).exists()
    assert Run.objects.get(pk=run_id).resume_count == 1
