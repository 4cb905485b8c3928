"""``ctx.emit``: an event is appended to the run's stream once across crashes and replays.

Each ``emit`` takes a step id as a call does and its event is stored under it: a re-execution
after a crash walks the same path to the same ``emit`` and appends nothing, so the stream holds
each event once, in order, under the id it got the first time.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness import faults
from ledger import transitions
from ledger.agents import agent, tool
from ledger.errors import LeaseLost
from ledger.models import StreamEvent

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@tool(kind="read", name="emit-test-read")
def emit_read(i: int) -> int:
    if i == 2:
        faults.point("emit-test.read")  # the test's crash point: the worker dies in step 2
    return i * 10


@agent("emit-test", tools=[emit_read], max_resumes=3)
def emit_agent(ctx: Any, inputs: Any) -> dict[str, Any]:
    seen = []
    for i in range(4):
        ctx.emit("progress", {"i": i})
        seen.append(ctx.call(emit_read, i=i))
    ctx.emit("done", {"seen": seen}, step="finished")
    return {"seen": seen}


@tool(kind="read", name="emit-test-aread")
async def emit_aread(i: int) -> int:
    return emit_read.fn(i)  # type: ignore[no-any-return]


@agent("emit-test-async", tools=[emit_aread], max_resumes=3)
async def emit_agent_async(ctx: Any, inputs: Any) -> dict[str, Any]:
    seen = []
    for i in range(4):
        await ctx.emit("progress", {"i": i})
        seen.append(await ctx.call(emit_aread, i=i))
    await ctx.emit("done", {"seen": seen}, step="finished")
    return {"seen": seen}


@agent("emit-test-bad", max_resumes=0)
def emit_bad(ctx: Any, inputs: Any) -> None:
    ctx.emit("", {"i": 1})


def _stream(run_id: str) -> list[tuple[int, str, str, Any]]:
    rows = StreamEvent.objects.filter(run_id=run_id).order_by("id")
    return [(r.id, r.step_id, r.kind, r.data) for r in rows]


@pytest.mark.parametrize("name", ["emit-test", "emit-test-async"])
def test_each_event_is_appended_once_across_a_crash_and_its_replay(
    execute, crash_at, name: str
) -> None:
    run = transitions.run_start(agent=name, inputs={})
    crash_at("emit-test.read")
    execute(run.run_id, crash_expected=True)
    before = _stream(run.run_id)
    assert [(step, kind, data) for _, step, kind, data in before] == [
        ("1.emit", "progress", {"i": 0}),
        ("3.emit", "progress", {"i": 1}),
        ("5.emit", "progress", {"i": 2}),
    ]

    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    after = _stream(run.run_id)
    assert after[:3] == before  # the replay appended nothing again; the ids did not move
    assert [(step, kind, data) for _, step, kind, data in after[3:]] == [
        ("7.emit", "progress", {"i": 3}),
        ("finished", "done", {"seen": [0, 10, 20, 30]}),
    ]
    ids = [i for i, *_ in after]
    assert ids == sorted(ids) and len(set(ids)) == 5


def test_an_emit_without_the_lease_writes_nothing() -> None:
    run = transitions.run_start(agent="emit-test", inputs={})
    with pytest.raises(LeaseLost):
        transitions.stream_append(
            run_id=run.run_id, token="not-the-lease", step_id="1.emit", kind="k", data=None
        )
    assert not StreamEvent.objects.filter(run_id=run.run_id).exists()


def test_an_emit_without_a_kind_fails_the_run_saying_why(execute) -> None:
    run = transitions.run_start(agent="emit-test-bad", inputs={})
    outcome = execute(run.run_id)
    assert outcome.status == "failed"
    assert "ctx.emit kind must be 1 to 100 characters" in outcome.detail
    assert not StreamEvent.objects.filter(run_id=run.run_id).exists()
