"""Bounded history: ``ctx.continue_as_new`` and the per-run step limit.

A run that continues ends as succeeded with ``{"continued_as": <new run id>}``; the new run is
queued with the carried inputs and ``parent_kind="continue"`` in the same fenced transaction,
and ``ledger.signals.run_queued`` tells the workers after the commit. A run whose ledger reaches
``RUNLEDGER_MAX_STEPS_PER_RUN`` stops as needs_attention (reason budget) instead of growing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harness import faults
from ledger import registry, transitions
from ledger.agents import agent, tool
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import Run, Step
from ledger.processes.preview import preview_resume
from ledger.signals import run_queued
from tests.support.announcements import recording

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def queued() -> Iterator[list[tuple[str, str]]]:
    """The run_queued signals received, as (run id, cause): what the workers would enqueue —
    but for the test's own starts (cause ``start``, announced too), left out here."""
    with recording(with_starts=False) as record:
        yield record.seen


def expected_total(records: int) -> int:
    return sum((i * 7919) % 1000 for i in range(records))


def follow(execute: Any, run_id: str) -> list[Any]:
    """Execute a run and each continuation it queues, as the workers would; the outcomes."""
    outcomes = []
    while run_id:
        outcome = execute(run_id)
        outcomes.append(outcome)
        run_id = outcome.continued_as
    return outcomes


def test_a_run_that_continues_ends_succeeded_and_queues_its_continuation_at_once(
    execute, queued
) -> None:
    inputs = {"records": 10, "page": 4}
    first = transitions.run_start(agent="paged_survey", inputs=inputs, max_resumes=7)
    outcome = execute(first.run_id)
    child_id = outcome.continued_as
    assert (outcome.status, outcome.result) == ("succeeded", {"continued_as": child_id})
    first.refresh_from_db()
    assert (first.status, first.result, first.lease_token) == (
        "succeeded",
        {"continued_as": child_id},
        None,
    )
    assert first.version == 3  # created, claimed, finished
    child = Run.objects.get(pk=child_id)
    assert (child.status, child.parent_id, child.parent_kind) == (
        "queued",
        first.run_id,
        "continue",
    )
    assert child.max_resumes == 7 and child.agent == "paged_survey"
    assert child.inputs == {
        **inputs,
        "start": 4,
        "total": expected_total(4),
        "sent": {"progress.4": f"{first.run_id}:progress.4"},  # the effect keys carried on
    }
    assert not Step.objects.filter(run_id=child_id).exists()  # a fresh, empty ledger
    assert queued == [(child_id, "continue")]  # after the commit, for the workers


def test_a_chain_of_continuations_gives_the_long_runs_result_with_bounded_ledgers(
    execute, queued
) -> None:
    first = transitions.run_start(agent="paged_survey", inputs={"records": 10, "page": 4})
    outcomes = follow(execute, first.run_id)
    assert [o.status for o in outcomes] == ["succeeded"] * 3
    assert outcomes[-1].result == {"total": expected_total(10), "records": 10, "emails": 3}
    runs = [o.run_id for o in outcomes]
    assert [r for r, _ in queued] == runs[1:]
    sizes = [Step.objects.filter(run_id=r).count() for r in runs]
    assert sizes == [5, 5, 3]  # one page of records and its progress email each
    assert OutboxMessage.objects.count() == 3
    lineage = [Run.objects.get(pk=r).parent_id for r in runs]
    assert lineage == [None, runs[0], runs[1]]


def test_the_continuation_exists_once_when_the_worker_dies_right_after_the_commit(
    execute, queued, crash_at
) -> None:
    run_queued.connect(_die_after_commit, dispatch_uid="test-die")
    crash_at("continue.after_commit")
    try:
        first = transitions.run_start(agent="paged_survey", inputs={"records": 6, "page": 3})
        execute(first.run_id, crash_expected=True)
    finally:
        run_queued.disconnect(dispatch_uid="test-die")
    first.refresh_from_db()
    assert first.status == "succeeded"
    children = list(Run.objects.filter(parent=first))
    assert len(children) == 1 and children[0].status == "queued"
    assert execute(first.run_id, worker="worker-2") is None  # finished: nobody runs it again
    assert Run.objects.filter(parent=first).count() == 1
    assert OutboxMessage.objects.count() == 1


def _die_after_commit(sender: Any, cause: str, **kwargs: Any) -> None:
    if cause == "continue":  # the continuation's announcement, not the test's own start
        faults.point("continue.after_commit")


def test_a_crash_before_the_continuation_replays_and_continues_once(
    execute, queued, crash_at
) -> None:
    crash_at("email.after_effect")  # the page's progress email went out; its success did not
    first = transitions.run_start(agent="paged_survey", inputs={"records": 6, "page": 3})
    execute(first.run_id, crash_expected=True)
    assert not Run.objects.filter(parent=first).exists()
    outcome = execute(first.run_id, worker="worker-2")
    assert outcome.status == "succeeded" and outcome.replayed == 3
    child = Run.objects.get(parent=first)
    assert outcome.continued_as == child.run_id
    assert child.inputs["sent"] == {"progress.3": f"{first.run_id}:progress.3"}
    assert OutboxMessage.objects.count() == 1
    assert queued == [(child.run_id, "continue")]


def test_a_worker_that_lost_its_lease_commits_no_continuation(execute, queued) -> None:
    @tool(kind="read", name="can-read")
    def read(n: int) -> int:
        return n

    @agent("can-thief-test", tools=[read])
    def body(ctx, inputs):
        ctx.call(read, step="one", n=1)
        Run.objects.filter(pk=ctx.run_id).update(lease_token="another-worker")
        ctx.continue_as_new({"more": True})

    try:
        run = transitions.run_start(agent="can-thief-test", inputs={})
        assert execute(run.run_id) is None
    finally:
        registry.unregister_agent("can-thief-test")
    run.refresh_from_db()
    assert (run.status, run.result, run.lease_token) == ("running", None, "another-worker")
    assert not Run.objects.filter(parent=run).exists()
    assert queued == []


def test_continue_as_new_inputs_that_are_not_json_fail_the_run_and_queue_nothing(
    execute, queued
) -> None:
    @agent("can-bad-test", tools=[])
    def body(ctx, inputs):
        ctx.continue_as_new({"cursor": {1, 2}})

    try:
        run = transitions.run_start(agent="can-bad-test", inputs={})
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("can-bad-test")
    assert outcome.status == "failed"
    assert "<continue_as_new inputs>" in outcome.detail and "$.cursor" in outcome.detail
    assert Run.objects.count() == 1 and queued == []


def test_an_agent_that_catches_exception_cannot_swallow_the_continuation(execute) -> None:
    @agent("can-catch-test", tools=[])
    def body(ctx, inputs):
        if inputs.get("next"):
            return {"done": True}
        try:
            ctx.continue_as_new({"next": True})
        except Exception:
            return {"swallowed": True}

    try:
        run = transitions.run_start(agent="can-catch-test", inputs={})
        outcomes = follow(execute, run.run_id)
    finally:
        registry.unregister_agent("can-catch-test")
    assert [o.result for o in outcomes] == [
        {"continued_as": outcomes[1].run_id},
        {"done": True},
    ]


def test_a_continuation_decided_by_history_length_is_decided_the_same_on_replay(
    execute, crash_at
) -> None:
    """``ctx.history_length`` counts the steps this execution has walked, so a resumed run
    continues where the first execution would have, not where the size of the ledger it
    loaded would suggest (here 5 rows at the start of the resume: that would continue at once
    and do the first page's work again in the next run)."""

    @tool(kind="read", name="can-item")
    def item(i: int) -> int:
        return i * i

    @tool(kind="read", name="can-mark")
    def mark(i: int) -> int:
        faults.point(f"can.mark.{i}")
        return i

    @agent("can-length-test", tools=[item, mark])
    def body(ctx, inputs):
        i, total, n = inputs.get("i", 0), inputs.get("total", 0), inputs["n"]
        while i < n:
            if ctx.history_length >= 5:
                ctx.continue_as_new({"i": i, "total": total, "n": n})
            total += ctx.call(item, step=f"item.{i}", i=i)
            ctx.call(mark, step=f"mark.{i}", i=i)
            i += 1
        return {"total": total}

    crash_at("can.mark.2")  # item.2 is committed, then the process dies
    try:
        run = transitions.run_start(agent="can-length-test", inputs={"n": 7})
        execute(run.run_id, crash_expected=True)
        assert Step.objects.filter(run_id=run.run_id).count() == 5
        outcomes = follow(execute, run.run_id)
    finally:
        registry.unregister_agent("can-length-test")
    assert outcomes[-1].result == {"total": sum(i * i for i in range(7))}
    firsts = [
        min(Step.objects.filter(run_id=o.run_id, step_id__startswith="item."), key=lambda s: s.seq)
        for o in outcomes
    ]
    assert [s.step_id for s in firsts] == ["item.0", "item.3", "item.6"]
    assert [Step.objects.filter(run_id=o.run_id).count() for o in outcomes] == [6, 6, 2]


def test_the_dry_replay_of_a_run_that_continued_says_so(execute) -> None:
    run = transitions.run_start(agent="paged_survey", inputs={"records": 4, "page": 2})
    execute(run.run_id)
    preview = preview_resume(run_id=run.run_id)
    assert preview.finished and "continues as a new run" in preview.stopped
    assert {s.action for s in preview.steps} == {"replay"}


# --- the history limit ---------------------------------------------------------------------


def test_a_run_whose_ledger_reaches_the_limit_stops_as_budget_until_it_is_raised(
    execute, settings
) -> None:
    settings.RUNLEDGER_MAX_STEPS_PER_RUN = 5
    run = transitions.run_start(agent="survey", inputs={"records": 8})
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "budget",
        "record.5",
    )
    assert "history limit reached" in outcome.detail
    assert "continue_as_new" in outcome.detail
    assert Step.objects.filter(run_id=run.run_id).count() == 5
    run.refresh_from_db()
    assert (run.status, run.reason) == ("needs_attention", "budget")
    settings.RUNLEDGER_MAX_STEPS_PER_RUN = 100
    transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded" and outcome.replayed == 5
    assert outcome.result["total"] == expected_total(8)


def test_a_fanout_that_would_pass_the_limit_runs_none_of_its_siblings(execute, settings) -> None:
    settings.RUNLEDGER_MAX_STEPS_PER_RUN = 4
    run = transitions.run_start(
        agent="batch_refund", inputs={"invoice_ids": ["inv_1001", "inv_1003", "inv_1004"]}
    )
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "budget",
        "refund.inv_1001",
    )
    assert sorted(Step.objects.filter(run_id=run.run_id).values_list("step_id", flat=True)) == [
        "fetch.inv_1001",
        "fetch.inv_1003",
        "fetch.inv_1004",
    ]
    assert ProviderCharge.objects.count() == 0
