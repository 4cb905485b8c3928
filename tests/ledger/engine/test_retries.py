"""The retry policy as a worker executes it (``ledger.processes.execute.run_execute``) on the
test database: back-off measured on a fake clock (its ``sleep`` moves time, nothing waits),
deterministic errors never retried, a long wait releasing the run, and every failed attempt's
exception kept with its traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from ledger import registry, selectors, transitions
from ledger.agents import agent, tool
from ledger.errors import RetryAfter
from ledger.models import Run, Step
from ledger.processes import sweep
from ledger.processes.execute import run_execute

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

FIXED_JITTER = 0.25  # rand() always answers this: each wait is its ceiling less 12.5 %
TOOL_CALLS: list[dict[str, Any]] = []


class Flaky(Exception):
    """A transient error of the fake downstream system."""


class Refused(Exception):
    """An error the tools declare not retryable."""


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    TOOL_CALLS.clear()
    yield
    for name in list(registry.agents()):
        if name.startswith("rt-"):
            registry.unregister_agent(name)


def execute(run_id: str, clock: Any) -> Any:
    return run_execute(
        run_id=run_id,
        worker="worker-1",
        clock=clock,
        heartbeat=False,
        sleep=clock.sleep,
        rand=lambda: FIXED_JITTER,
    )


def one_step_agent(name: str, the_tool: Any, **inputs: Any) -> Run:
    @agent(name, tools=[the_tool])
    def body(ctx: Any, run_inputs: Any) -> Any:
        return ctx.call(the_tool, step="work", **inputs)

    return transitions.run_start(agent=name, inputs={})


def failing(times: int, exc: BaseException) -> Any:
    def fn(**kwargs: Any) -> Any:
        TOOL_CALLS.append(kwargs)
        if len(TOOL_CALLS) <= times:
            raise exc
        return {"ok": len(TOOL_CALLS)}

    return fn


def step(run: Run) -> Step:
    return Step.objects.get(run_id=run.run_id, step_id="work")


# --- back-off ---------------------------------------------------------------------------------


def test_back_off_grows_exponentially_with_jitter_up_to_its_ceiling(clock) -> None:
    @tool(kind="read", name="rt-backoff", retries=4, backoff=1.0, backoff_max=3.0, jitter=0.5)
    def read(x: int) -> Any:
        return failing(4, Flaky("downstream timed out"))(x=x)

    run = one_step_agent("rt-backoff", read, x=1)
    started = clock.now
    outcome = execute(run.run_id, clock)

    assert outcome.status == "succeeded", outcome
    # 1 s, 2 s, then the 3 s ceiling twice (4 s and 8 s capped), each less 0.5 * 0.25 of it
    assert clock.slept == [0.875, 1.75, 2.625, 2.625]
    assert clock.now - started == timedelta(seconds=sum(clock.slept))
    row = step(run)
    assert (row.status, row.attempt, len(TOOL_CALLS)) == ("succeeded", 5, 5)
    fails = selectors.attempt_failures("work", row.errors)
    assert [f.attempt for f in fails] == [1, 2, 3, 4]
    assert [f.wait_seconds for f in fails] == clock.slept
    assert all(f.type.endswith("Flaky") and f.message == "downstream timed out" for f in fails)


def test_a_tool_that_says_retry_after_is_waited_for_that_long(clock, settings) -> None:
    settings.RUNLEDGER_RETRY_SLEEP_MAX_SECONDS = 10.0

    @tool(kind="read", name="rt-after", retries=1, backoff=0.1, backoff_max=0.2)
    def read() -> Any:
        return failing(1, RetryAfter(7, "429 Too Many Requests"))()

    run = one_step_agent("rt-after", read)
    outcome = execute(run.run_id, clock)
    assert outcome.status == "succeeded"
    assert clock.slept == [7.0]  # not the 0.1 s back-off, not jittered
    (fail,) = selectors.attempt_failures("work", step(run).errors)
    assert (fail.retry_after, fail.wait_seconds, fail.type) == (
        7.0,
        7.0,
        "ledger.errors.RetryAfter",
    )


def test_the_last_failure_fails_the_run_without_waiting_after_it(clock) -> None:
    @tool(kind="read", name="rt-exhaust", retries=2, backoff=1.0, jitter=0.0)
    def read() -> Any:
        return failing(99, Flaky("still down"))()

    run = one_step_agent("rt-exhaust", read)
    outcome = execute(run.run_id, clock)
    assert outcome.status == "failed"
    assert "failed on attempt 3" in outcome.detail
    assert clock.slept == [1.0, 2.0]
    fails = selectors.attempt_failures("work", step(run).errors)
    assert [(f.final, f.why) for f in fails][-1] == (True, "no retries left (the tool allows 2)")
    assert [f.retry_at is not None for f in fails] == [True, True, False]


# --- never retried ----------------------------------------------------------------------------


def test_a_result_that_is_not_json_is_not_retried(clock) -> None:
    @tool(kind="read", name="rt-notjson", retries=3)
    def read() -> Any:
        TOOL_CALLS.append({})
        return {"when": object()}

    run = one_step_agent("rt-notjson", read)
    outcome = execute(run.run_id, clock)
    assert outcome.status == "failed"
    assert (len(TOOL_CALLS), step(run).attempt, clock.slept) == (1, 1, [])


def test_arguments_that_do_not_fit_the_tool_are_not_retried(clock) -> None:
    @tool(kind="read", name="rt-signature", retries=3)
    def read(invoice_id: str) -> Any:
        TOOL_CALLS.append({})
        return {}

    run = one_step_agent("rt-signature", read, invoice=1)  # a misspelt argument
    outcome = execute(run.run_id, clock)
    assert outcome.status == "failed"
    row = step(run)
    assert (row.attempt, TOOL_CALLS, clock.slept) == (1, [], [])
    (fail,) = selectors.attempt_failures("work", row.errors)
    assert (fail.type, fail.final) == ("TypeError", True)
    assert fail.why == "the call's arguments do not fit the tool"


def test_a_type_error_raised_inside_the_tool_follows_the_policy(clock) -> None:
    @tool(kind="read", name="rt-inner-type", retries=1, backoff=0.5, jitter=0.0)
    def read(n: int) -> Any:
        TOOL_CALLS.append({})
        return n + "1"  # type: ignore[operator]

    run = one_step_agent("rt-inner-type", read, n=1)
    assert execute(run.run_id, clock).status == "failed"
    assert (len(TOOL_CALLS), clock.slept) == (2, [0.5])


def test_a_declared_non_retryable_error_is_not_retried(clock) -> None:
    @tool(kind="read", name="rt-refused", retries=3, non_retryable=(Refused,))
    def read() -> Any:
        return failing(99, Refused("account closed"))()

    run = one_step_agent("rt-refused", read)
    assert execute(run.run_id, clock).status == "failed"
    assert (len(TOOL_CALLS), clock.slept) == (1, [])
    (fail,) = selectors.attempt_failures("work", step(run).errors)
    assert (fail.final, fail.why) == (True, "not retryable")


# --- a long wait releases the run -------------------------------------------------------------


def test_a_long_back_off_releases_the_run_until_the_retry_is_due(clock, settings) -> None:
    settings.RUNLEDGER_RETRY_SLEEP_MAX_SECONDS = 5.0

    @tool(kind="read", name="rt-release", retries=1)
    def read() -> Any:
        return failing(1, RetryAfter(60, "come back in a minute"))()

    run = one_step_agent("rt-release", read)
    released_at = clock.now
    outcome = execute(run.run_id, clock)

    assert (outcome.status, outcome.reason, outcome.step_id) == ("queued", "backoff", "work")
    assert clock.slept == []  # the worker did not wait
    run.refresh_from_db()
    assert (run.status, run.lease_token, run.lease_owner) == ("queued", None, "")
    assert run.wake_at == released_at + timedelta(seconds=60)
    assert "waiting to retry step 'work'" in run.detail
    # Not claimable before it is due: an early delivery does nothing.
    assert transitions.lease_claim(run_id=run.run_id, owner="early", clock=clock) is None
    assert execute(run.run_id, clock) is None

    clock.advance(60)
    outcome = execute(run.run_id, clock)
    assert outcome.status == "succeeded"
    run.refresh_from_db()
    assert (run.resume_count, run.wake_at, run.executions) == (0, None, 2)  # no budget spent
    row = step(run)
    assert (row.attempt, len(TOOL_CALLS)) == (2, 2)


def test_the_retry_budget_goes_on_counting_across_a_release(clock, settings) -> None:
    settings.RUNLEDGER_RETRY_SLEEP_MAX_SECONDS = 5.0

    @tool(kind="read", name="rt-budget", retries=2, backoff=30.0, backoff_max=30.0, jitter=0.0)
    def read() -> Any:
        return failing(99, Flaky("down"))()

    run = one_step_agent("rt-budget", read)
    assert execute(run.run_id, clock).status == "queued"  # attempt 1, then 30 s to wait
    clock.advance(30)
    assert execute(run.run_id, clock).status == "queued"  # attempt 2, 60 s capped to 30
    clock.advance(30)
    outcome = execute(run.run_id, clock)  # attempt 3: the policy's last
    assert outcome.status == "failed"
    assert (len(TOOL_CALLS), step(run).attempt) == (3, 3)


def test_a_released_run_is_lost_for_the_sweep_only_once_overdue(clock, settings) -> None:
    settings.RUNLEDGER_RETRY_SLEEP_MAX_SECONDS = 5.0

    @tool(kind="read", name="rt-lost", retries=1)
    def read() -> Any:
        return failing(1, RetryAfter(600))()

    run = one_step_agent("rt-lost", read)
    execute(run.run_id, clock)  # released until now + 600 s; say its countdown message is lost
    lost_after = 300.0
    clock.advance(lost_after + 1)  # long enough for a plain queued run, not for this one
    assert sweep.runs_sweep(lost_after=lost_after, clock=clock) == []
    clock.advance(600)
    assert sweep.runs_sweep(lost_after=lost_after, clock=clock) == [run.run_id]
    assert execute(run.run_id, clock).status == "succeeded"


# --- every failed attempt explains itself -----------------------------------------------------


def _fetch_from_downstream(invoice_id: str) -> Any:
    raise ConnectionError(f"downstream refused {invoice_id}")


def test_a_failed_attempt_keeps_its_type_message_and_the_authors_frames(clock, caplog) -> None:
    @tool(kind="read", name="rt-trace", retries=0)
    def fetch_invoice(invoice_id: str) -> Any:
        return _fetch_from_downstream(invoice_id)

    @agent("rt-trace", tools=[fetch_invoice])
    def refund_agent(ctx: Any, inputs: Any) -> Any:
        return ctx.call(fetch_invoice, step="work", invoice_id="inv_9")

    run = transitions.run_start(agent="rt-trace", inputs={})
    with caplog.at_level(logging.WARNING, logger="ledger.engine.live"):
        assert execute(run.run_id, clock).status == "failed"
    (fail,) = selectors.run_failures(run_id=run.run_id)["work"]
    assert (fail.type, fail.message) == ("ConnectionError", "downstream refused inv_9")
    tb = fail.traceback
    # the agent's call, the tool, and the helper that raised; none of the engine's frames
    for frame in ("in refund_agent", "in fetch_invoice", "in _fetch_from_downstream"):
        assert frame in tb, tb
    assert not any(
        f"/ledger/{m}" in tb for m in ("engine/live.py", "engine/context.py", "processes/")
    )
    assert tb.rstrip().endswith("ConnectionError: downstream refused inv_9")
    (record,) = [r for r in caplog.records if r.name == "ledger.engine.live"]
    assert (record.step_id, record.error_type) == ("work", "ConnectionError")  # type: ignore[attr-defined]
    assert run.run_id in record.getMessage() and "giving up" in record.getMessage()


def test_a_huge_traceback_is_cut_keeping_where_it_raised(clock, settings) -> None:
    settings.RUNLEDGER_MAX_TRACEBACK_CHARS = 600

    def deep(n: int) -> Any:
        if n == 0:
            raise Flaky("bottom " + "x" * 50)
        return deep(n - 1)

    @tool(kind="read", name="rt-deep", retries=0)
    def read() -> Any:
        return deep(100)

    run = one_step_agent("rt-deep", read)
    execute(run.run_id, clock)
    (fail,) = selectors.run_failures(run_id=run.run_id)["work"]
    assert len(fail.traceback) <= 600 + 40
    assert fail.traceback.startswith("… [") and "characters cut]" in fail.traceback
    assert fail.traceback.rstrip().endswith("bottom " + "x" * 50)
