"""History bounded by size: ``ctx.history_bytes`` (the same on a replay) and the per-run limit
``RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN`` beside the step-count limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness import faults
from ledger import registry, transitions
from ledger.agents import RunContext, agent, tool
from ledger.models import Run, Step

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

AGENT = "bytes-agent"
seen_bytes: list[int] = []


@tool(kind="read")
def big_page(index: int) -> dict[str, Any]:
    """A page of 1,000 bytes of data."""
    faults.point("big_page")
    return {"index": index, "blob": "x" * 1000}


@pytest.fixture(autouse=True)
def bytes_agent() -> Iterator[None]:
    @agent(AGENT, max_resumes=5, tools=[big_page])
    def pages(ctx: RunContext, inputs: dict[str, Any]) -> dict[str, Any]:
        start, done = inputs.get("start", 0), inputs.get("done", 0)
        for i in range(start, inputs["pages"]):
            if inputs.get("continue_at") and ctx.history_bytes >= inputs["continue_at"]:
                ctx.continue_as_new({**inputs, "start": i, "done": done})
            ctx.call(big_page, step=f"page.{i}", index=i)
            done += 1
            seen_bytes.append(ctx.history_bytes)
        return {"done": done}

    seen_bytes.clear()
    yield
    registry.unregister_agent(AGENT)


def test_a_run_past_the_byte_limit_stops_as_budget(execute: Any, settings: Any) -> None:
    settings.RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN = 5000
    run_id = transitions.run_start(agent=AGENT, inputs={"pages": 20}).run_id
    outcome = execute(run_id)
    run = Run.objects.get(pk=run_id)
    assert outcome.status == "needs_attention" and run.reason == "budget"
    assert Step.objects.filter(run_id=run_id).count() == 5  # 5 pages of 1,021 bytes pass 5,000
    assert run.blocked_step_id == "page.5"
    assert "RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN is 5000" in run.detail
    settings.RUNLEDGER_MAX_HISTORY_BYTES_PER_RUN = 50_000  # raised: the run goes on
    transitions.run_resume(run_id=run_id, by="test", reason="raised", seen_version=None)
    assert execute(run_id).status == "succeeded"


def test_an_agent_continues_as_new_by_size_and_history_bytes_replays_the_same(
    execute: Any, crash_at: Any
) -> None:
    inputs = {"pages": 9, "continue_at": 3000}
    run_id = transitions.run_start(agent=AGENT, inputs=inputs).run_id
    crash_at("big_page", times=1)  # the first page's read dies: nothing walked yet
    execute(run_id, crash_expected=True)
    seen_bytes.clear()
    first = execute(run_id, worker="worker-2")
    sizes_first = list(seen_bytes)
    assert first.continued_as, first
    assert Step.objects.filter(run_id=run_id).count() == 3  # 3 pages passed 3,000 bytes
    # A replay of the same run walks to the same sizes (the number is deterministic).
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(run_id=run_id, by="test", reason="replay", seen_version=None)
    seen_bytes.clear()
    again = execute(run_id, worker="worker-3")
    assert seen_bytes == sizes_first == [1021, 2042, 3063]
    carried = Run.objects.get(pk=first.continued_as).inputs
    assert Run.objects.get(pk=again.continued_as).inputs == carried  # the same cut
    assert carried["start"] == 3
    chain, nxt = [], first.continued_as
    while nxt:
        outcome = execute(nxt)
        chain.append(outcome)
        nxt = outcome.continued_as
    assert chain[-1].result == {"done": 9} and len(chain) == 2  # 3 pages each, after the first
