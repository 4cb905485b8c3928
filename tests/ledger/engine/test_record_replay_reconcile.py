"""One test per row of the engine's behaviour, on a real database (PostgreSQL; SQLite too).

Crash tests assert the seed's pair: the final result equals the uninterrupted run's AND each
external effect happened exactly once, counted in the simulators' tables.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from ledger import registry, transitions
from ledger.agents import agent, tool
from ledger.errors import LeaseLost, NotJSON
from ledger.examples import agents as examples
from ledger.examples.models import Notification, OutboxMessage, ProviderCharge
from ledger.models import Run, Step
from ledger.processes import execute
from tests.support.ledger_writes import read_write

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

RUN_ID = "run_fixed_for_comparison"
#: The refund agent the tests below start: ``refund``, or its async twin (``refund_agent``).
REFUND = {"agent": "refund"}


@pytest.fixture(params=["refund", "refund_async"])
def refund_agent(request: pytest.FixtureRequest) -> Any:
    """The sync example agent and its async twin: the same cases, the same ledger."""
    REFUND["agent"] = request.param
    yield request.param
    REFUND["agent"] = "refund"


def effects() -> dict[str, int]:
    return {
        "charges": ProviderCharge.objects.count(),
        "emails": OutboxMessage.objects.count(),
        "notifications": Notification.objects.count(),
    }


def steps(run_id: str) -> dict[str, Step]:
    return {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}


@pytest.fixture
def baseline(execute, refund_agent) -> dict[str, Any]:
    """The uninterrupted run's result, then a clean slate for the crash under test."""
    run = start_refund()
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded"
    Step.objects.all().delete()
    Run.objects.all().delete()
    for model in (ProviderCharge, OutboxMessage, Notification):
        model.objects.all().delete()
    return outcome.result


def start_refund(invoice: str = "inv_1001") -> Run:
    return transitions.run_start(
        agent=REFUND["agent"], inputs={"invoice_id": invoice}, run_id=RUN_ID
    )


def test_an_uninterrupted_run_writes_one_row_per_call_in_order(refund_agent, execute) -> None:
    run = start_refund()
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded"
    chain = steps(run.run_id)
    assert list(chain) == [
        "fetch_invoice",
        "decided_at",
        "decide",
        "refund",
        "email_customer",
        "notify",
    ]
    assert [s.next_step_id for s in chain.values()] == [*list(chain)[1:], None]
    assert all(s.status == "succeeded" and s.attempt == 1 for s in chain.values())
    assert chain["refund"].effect_key == f"{RUN_ID}:refund"
    assert chain["fetch_invoice"].effect_key is None
    assert chain["decide"].model_id == "scripted:refund-decision" and chain["decide"].prompt_hash
    assert effects() == {"charges": 1, "emails": 1, "notifications": 1}


def test_a_resume_replays_succeeded_steps_without_executing_them(
    refund_agent, execute, crash_at
) -> None:
    from harness import faults

    calls: list[int] = []
    run = start_refund()
    execute(run.run_id)
    Run.objects.filter(pk=run.run_id).update(status="needs_attention")
    transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
    faults.set_hook("fetch_invoice", lambda: calls.append(1))
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded"
    assert outcome.replayed == 6 and outcome.executed == 0
    assert calls == []
    assert effects() == {"charges": 1, "emails": 1, "notifications": 1}


def test_a_crash_after_the_intent_commit_leaves_a_started_row_and_resume_sends_once(
    refund_agent, execute, crash_at, baseline
) -> None:
    run = start_refund()
    crash_at("charge.before_effect")
    execute(run.run_id, crash_expected=True)
    row = steps(run.run_id)["refund"]
    assert (row.status, row.effect_key, row.result) == ("started", f"{RUN_ID}:refund", None)
    assert ProviderCharge.objects.count() == 0
    outcome = execute(run.run_id, worker="worker-2")
    assert outcome.status == "succeeded"
    assert outcome.result == baseline
    assert effects() == {"charges": 1, "emails": 1, "notifications": 1}
    refund = steps(run.run_id)["refund"]
    assert (refund.status, refund.attempt, refund.effect_key) == (
        "succeeded",
        2,
        f"{RUN_ID}:refund",
    )


def test_a_started_effect_is_reconciled_not_retried(
    refund_agent, execute, crash_at, baseline
) -> None:
    run = start_refund()
    crash_at("charge.after_effect")
    execute(run.run_id, crash_expected=True)
    assert steps(run.run_id)["refund"].status == "started"
    assert ProviderCharge.objects.count() == 1
    outcome = execute(run.run_id, worker="worker-2")
    assert outcome.status == "succeeded"
    assert outcome.result == baseline
    assert effects() == {"charges": 1, "emails": 1, "notifications": 1}
    assert steps(run.run_id)["refund"].attempt == 1  # settled by lookup, not executed again


def test_an_email_crash_is_reconciled_through_message_id_search(
    refund_agent, execute, crash_at, baseline
) -> None:
    run = start_refund()
    crash_at("email.after_effect")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id, worker="worker-2")
    assert outcome.result == baseline
    assert effects() == {"charges": 1, "emails": 1, "notifications": 1}


def test_an_effect_with_no_read_path_blocks_for_settlement_and_is_not_repeated(
    refund_agent, execute, crash_at
) -> None:
    run = start_refund()
    crash_at("notify.after_effect")
    execute(run.run_id, crash_expected=True)
    outcome = execute(run.run_id, worker="worker-2")
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "reconciliation",
        "notify",
    )
    run.refresh_from_db()
    assert (run.status, run.reason, run.blocked_step_id) == (
        "needs_attention",
        "reconciliation",
        "notify",
    )
    assert "no read path" in run.detail
    assert run.lease_token is None
    assert steps(run.run_id)["notify"].status == "started"
    assert effects() == {"charges": 1, "emails": 1, "notifications": 1}


def test_a_changed_prompt_is_refused_as_stale_and_nothing_executes(
    refund_agent, execute, crash_at, monkeypatch
) -> None:
    run = start_refund()
    crash_at("charge.before_effect")
    execute(run.run_id, crash_expected=True)
    monkeypatch.setattr(examples, "REFUND_PROMPT", examples.REFUND_PROMPT + " Be brief.")
    outcome = execute(run.run_id, worker="worker-2")
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "stale",
        "decide",
    )
    assert "differs" in outcome.detail
    assert ProviderCharge.objects.count() == 0
    assert steps(run.run_id)["refund"].status == "started"


def test_clock_random_uuid_and_model_are_recorded_and_replayed_identically(execute, clock) -> None:
    seen: list[tuple[Any, ...]] = []
    model_calls: list[str] = []

    from ledger import llm

    @llm.script("echo-test")
    def _echo(prompt: str, system: str) -> dict[str, Any]:
        model_calls.append(prompt)
        return {"text": prompt.upper()}

    @agent("recorder-test", tools=[])
    def recorder(ctx, inputs):
        values = (
            ctx.now().isoformat(),
            ctx.random(),
            ctx.uuid(),
            ctx.model("hi", model="scripted:echo-test"),
        )
        seen.append(values)
        return {"values": list(values)}

    try:
        run = transitions.run_start(agent="recorder-test", inputs={})
        first = execute(run.run_id)
        Run.objects.filter(pk=run.run_id).update(status="failed")
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
        clock.advance(3600)
        second = execute(run.run_id)
    finally:
        registry.unregister_agent("recorder-test")
    assert seen[0] == seen[1]
    assert first.result == second.result
    assert model_calls == ["hi"]
    assert [s.kind for s in steps(run.run_id).values()] == ["clock", "clock", "clock", "model"]


def _register_switchable(name: str, policy: str, branch: list[str]) -> None:
    @tool(kind="read", name=f"{name}-read")
    def read(n: int) -> int:
        return n * 2

    @tool(kind="effect", name=f"{name}-pay", reconcile=examples.simulators.provider_lookup)
    def pay(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        return examples.simulators.provider_charge(
            customer="cus_test", amount_cents=amount, idempotency_key=idempotency_key
        )

    @agent(name, divergence=policy, tools=[read, pay])
    def switchable(ctx, inputs):
        ctx.call(read, step="a", n=1)
        ctx.call(pay, step="pay", amount=5)
        for step in branch:
            ctx.call(read, step=step, n=2)
        return {"branch": list(branch)}


@pytest.mark.parametrize("policy", ["refuse", "replan"])
def test_a_changed_path_is_a_divergence_handled_by_the_agents_policy(
    execute, crash_at, policy
) -> None:
    branch = ["b", "c"]
    _register_switchable("switch-test", policy, branch)
    try:
        run = transitions.run_start(agent="switch-test", inputs={})
        assert execute(run.run_id).status == "succeeded"
        Run.objects.filter(pk=run.run_id).update(status="failed")
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
        branch[:] = ["x", "c"]  # today's code goes a→pay→x instead of a→pay→b
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("switch-test")
    rows = steps(run.run_id)
    if policy == "refuse":
        assert (outcome.status, outcome.reason, outcome.step_id) == (
            "needs_attention",
            "divergence",
            "x",
        )
        assert "'b'" in outcome.detail and "'x'" in outcome.detail
        assert "x" not in rows
    else:
        assert outcome.status == "succeeded"
        assert rows["b"].status == "abandoned"
        assert rows["pay"].status == "succeeded"  # effect rows are kept
        assert rows["pay"].next_step_id == "x"
        assert rows["x"].status == "succeeded"
    assert ProviderCharge.objects.count() == 1


@pytest.mark.parametrize("policy", ["refuse", "replan"])
def test_a_plan_version_change_between_crash_and_resume_follows_the_policy(
    execute, clock, policy
) -> None:
    @tool(kind="read", name="pv-read")
    def read(n: int) -> int:
        return n

    def body(ctx, inputs):
        return {"n": ctx.call(read, step="one", n=1)}

    agent("pv-test", plan_version="1", divergence=policy, tools=[read])(body)
    try:
        run = transitions.run_start(agent="pv-test", inputs={})
        # The dead worker's lease ran out at once, on the same clock the next worker reads;
        # it had begun executing (it stamped the plan of the code it ran).
        token = transitions.lease_claim(
            run_id=run.run_id, owner="dead-worker", seconds=-1, clock=clock
        )
        assert token is not None
        transitions.run_stamp_plan(run_id=run.run_id, token=token, clock=clock)
        agent("pv-test", plan_version="2", divergence=policy, tools=[read])(body)
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("pv-test")
    run.refresh_from_db()
    if policy == "refuse":
        assert (outcome.status, outcome.reason) == ("needs_attention", "divergence")
        assert "plan version '1' → '2'" in outcome.detail
        assert run.plan_version == "1"
    else:
        assert outcome.status == "succeeded"
        assert run.plan_version == "2"


def test_a_tool_schema_change_is_detected(execute, clock) -> None:
    @tool(kind="read", name="ts-read")
    def read(n: int) -> int:
        return n

    @tool(kind="read", name="ts-read-renamed")
    def read2(n: int) -> int:
        return n

    def body(ctx, inputs):
        return ctx.call(read, step="one", n=1)

    agent("ts-test", tools=[read])(body)
    try:
        run = transitions.run_start(agent="ts-test", inputs={})
        # A worker began executing it under the first schema, and died.
        token = transitions.lease_claim(run_id=run.run_id, owner="dead", seconds=-1, clock=clock)
        assert token is not None
        transitions.run_stamp_plan(run_id=run.run_id, token=token, clock=clock)
        agent("ts-test", tools=[read2])(body)
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("ts-test")
    assert (outcome.status, outcome.reason) == ("needs_attention", "divergence")
    assert "tool schema" in outcome.detail


def test_a_worker_whose_lease_was_taken_commits_nothing(execute, clock, crash_at) -> None:
    run = start_refund()
    crash_at("charge.before_effect")
    old_token = transitions.lease_claim(run_id=run.run_id, owner="old", seconds=30, clock=clock)
    assert old_token
    clock.advance(31)  # the old worker stalls past its lease; another takes over
    new_token = transitions.lease_claim(run_id=run.run_id, owner="new", seconds=30, clock=clock)
    assert new_token and new_token != old_token
    write = read_write(
        run_id=run.run_id, token=old_token, step_id="late", now=clock(), result_json='"late"'
    )
    with pytest.raises(LeaseLost):
        transitions.step_write(write)
    assert not Step.objects.filter(run_id=run.run_id).exists()
    write.token = new_token
    assert transitions.step_write(write) > 0
    with pytest.raises(LeaseLost):
        transitions.step_update(
            run_id=run.run_id, token=old_token, pk=1, status="failed", now=clock()
        )


def test_a_cancelled_run_stays_cancelled_when_its_worker_carries_on(
    refund_agent, execute, clock
) -> None:
    run = start_refund()

    def cancel_midway() -> None:
        transitions.run_cancel(by="test", reason="cancel", seen_version=None, run_id=run.run_id)

    from harness import faults

    faults.set_hook("charge.before_effect", cancel_midway)
    try:
        outcome = execute(run.run_id)
    finally:
        faults.clear_hooks()
    assert outcome is None  # the worker learnt it lost the run and stopped
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert steps(run.run_id)["refund"].status == "started"  # the late success was refused
    assert OutboxMessage.objects.count() == 0


def test_a_second_claim_on_a_live_lease_is_refused(clock) -> None:
    run = start_refund()
    assert transitions.lease_claim(run_id=run.run_id, owner="a", clock=clock)
    assert transitions.lease_claim(run_id=run.run_id, owner="b", clock=clock) is None
    assert execute.run_execute(run_id=run.run_id, worker="b", clock=clock, heartbeat=False) is None


def test_the_resume_budget_stops_the_run_loudly_until_raised(execute, crash_at) -> None:
    run = transitions.run_start(
        agent="refund", inputs={"invoice_id": "inv_1001"}, run_id=RUN_ID, max_resumes=1
    )
    crash_at("fetch_invoice", times=2)
    execute(run.run_id, crash_expected=True)
    execute(run.run_id, crash_expected=True)  # resume 1 of 1, crashes again
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "budget")
    run.refresh_from_db()
    assert (run.resume_count, run.max_resumes) == (1, 1)
    with pytest.raises(transitions.NotAllowed, match="budget"):
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
    transitions.run_resume(
        by="test", reason="resume", seen_version=None, run_id=run.run_id, max_resumes=3
    )
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded"
    run.refresh_from_db()
    assert run.resume_count == 2


def test_retries_count_attempts_and_keep_the_effect_key(execute) -> None:
    failures = [2]
    keys: list[str] = []

    @tool(kind="effect", name="flaky-pay", retries=3, reconcile=examples.simulators.provider_lookup)
    def flaky(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        keys.append(idempotency_key)
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("provider timed out")
        return examples.simulators.provider_charge(
            customer="cus_retry", amount_cents=amount, idempotency_key=idempotency_key
        )

    @agent("retry-test", tools=[flaky])
    def body(ctx, inputs):
        return ctx.call(flaky, step="pay", amount=7)

    try:
        run = transitions.run_start(agent="retry-test", inputs={})
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("retry-test")
    assert outcome.status == "succeeded"
    row = steps(run.run_id)["pay"]
    assert row.attempt == 3
    assert len(set(keys)) == 1 and keys[0] == row.effect_key
    assert [e["attempt"] for e in row.errors] == [1, 2]
    assert "provider timed out" in row.errors[0]["error"]
    assert ProviderCharge.objects.count() == 1


def test_a_read_that_keeps_failing_fails_the_run_with_every_attempts_error(execute) -> None:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_missing"})
    outcome = execute(run.run_id)
    assert outcome.status == "failed"
    assert "no invoice inv_missing" in outcome.detail
    row = steps(run.run_id)["fetch_invoice"]
    assert (row.status, row.attempt, len(row.errors)) == ("failed", 3, 3)


def test_inputs_that_are_not_json_are_refused_before_anything_runs(execute) -> None:
    sent: list[Any] = []

    @tool(kind="effect", name="bad-input-pay")
    def pay(payload: Any, *, idempotency_key: str) -> str:
        sent.append(payload)
        return "ok"

    @agent("bad-input-test", tools=[pay])
    def body(ctx, inputs):
        return ctx.call(pay, step="plan.3.pay", payload={"when": object()})

    try:
        run = transitions.run_start(agent="bad-input-test", inputs={})
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("bad-input-test")
    assert outcome.status == "failed"
    assert "step 'plan.3.pay', $.payload.when: a object is not JSON" in outcome.detail
    assert sent == []
    assert not Step.objects.filter(run_id=run.run_id).exists()
    with pytest.raises(NotJSON, match=r"\$\.x"):
        transitions.run_start(agent="refund", inputs={"x": float("nan")})


def test_a_step_id_used_twice_is_an_error_not_an_overwrite(execute) -> None:
    @tool(kind="read", name="dup-read")
    def read(n: int) -> int:
        return n

    @agent("dup-test", tools=[read])
    def body(ctx, inputs):
        ctx.call(read, step="same", n=1)
        return ctx.call(read, step="same", n=2)

    try:
        run = transitions.run_start(agent="dup-test", inputs={})
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("dup-test")
    assert outcome.status == "failed"
    assert "used twice" in outcome.detail
    assert steps(run.run_id)["same"].result == 1


def test_an_effect_returning_non_json_blocks_for_settlement_instead_of_repeating(execute) -> None:
    @tool(kind="effect", name="weird-pay")
    def pay(*, idempotency_key: str) -> Any:
        return {"at": object()}

    @agent("weird-test", tools=[pay])
    def body(ctx, inputs):
        return ctx.call(pay, step="pay")

    try:
        run = transitions.run_start(agent="weird-test", inputs={})
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("weird-test")
    assert (outcome.status, outcome.reason) == ("needs_attention", "reconciliation")
    assert steps(run.run_id)["pay"].status == "started"


def test_a_run_of_an_unregistered_agent_blocks_with_agent_missing(execute) -> None:
    run = start_refund()
    Run.objects.filter(pk=run.run_id).update(agent="gone-agent")
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "agent_missing")
    assert "gone-agent" in outcome.detail


def test_large_inputs_are_stored_truncated_but_hashed_whole(execute, settings) -> None:
    settings.RUNLEDGER_MAX_STORED_INPUT_BYTES = 1000

    @tool(kind="read", name="big-read")
    def read(text: str) -> int:
        return len(text)

    @agent("big-test", tools=[read])
    def body(ctx, inputs):
        return ctx.call(read, step="big", text="x" * 5000)

    try:
        run = transitions.run_start(agent="big-test", inputs={})
        execute(run.run_id)
    finally:
        registry.unregister_agent("big-test")
    row = steps(run.run_id)["big"]
    assert row.inputs_truncated and row.inputs["truncated"] and row.inputs["bytes"] > 5000
    assert len(row.input_hash) == 64


def test_a_resume_loads_the_ledger_in_a_constant_number_of_queries(execute) -> None:
    counts = []
    for records in (20, 200):
        run = transitions.run_start(agent="survey", inputs={"records": records})
        assert execute(run.run_id).status == "succeeded"
        Run.objects.filter(pk=run.run_id).update(status="failed")
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            outcome = execute(run.run_id)
        assert outcome.status == "succeeded" and outcome.executed == 0
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_a_read_whose_freshness_expired_is_read_again_on_resume(execute, clock) -> None:
    reads: list[int] = []

    @tool(kind="read", name="fresh-read", ttl_seconds=60)
    def quote(symbol: str) -> int:
        reads.append(1)
        return 100 + len(reads)

    @tool(kind="read", name="fresh-other")
    def other(n: int) -> int:
        return n

    @agent("fresh-test", tools=[quote, other])
    def body(ctx, inputs):
        price = ctx.call(quote, step="quote", symbol="ACME")
        ctx.call(other, step="after", n=1)
        return {"price": price}

    try:
        run = transitions.run_start(agent="fresh-test", inputs={})
        assert execute(run.run_id).result == {"price": 101}
        Run.objects.filter(pk=run.run_id).update(status="failed")
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
        clock.advance(30)
        assert execute(run.run_id).result == {"price": 101}  # still fresh: replayed
        Run.objects.filter(pk=run.run_id).update(status="failed")
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
        clock.advance(60)
        assert execute(run.run_id).result == {"price": 102}  # expired: read again
    finally:
        registry.unregister_agent("fresh-test")
    assert len(reads) == 2
    assert steps(run.run_id)["quote"].attempt == 2


def test_a_failed_effect_is_looked_up_before_it_is_sent_again(execute) -> None:
    """A charge that timed out after the provider took it is settled by lookup on resume."""
    sent: list[str] = []

    @tool(kind="effect", name="timeout-pay", reconcile=examples.simulators.provider_lookup)
    def pay(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        examples.simulators.provider_charge(
            customer="cus_slow", amount_cents=amount, idempotency_key=idempotency_key
        )
        sent.append(idempotency_key)
        if len(sent) == 1:
            raise TimeoutError("the provider took the charge but the answer timed out")
        raise AssertionError("sent a second time")

    @agent("timeout-test", tools=[pay])
    def body(ctx, inputs):
        return ctx.call(pay, step="pay", amount=9)

    try:
        run = transitions.run_start(agent="timeout-test", inputs={})
        assert execute(run.run_id).status == "failed"
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("timeout-test")
    assert outcome.status == "succeeded"
    assert outcome.result["amount_cents"] == 9
    assert len(sent) == 1
    assert ProviderCharge.objects.count() == 1


def test_a_failed_effect_retried_with_other_inputs_is_stale_not_sent(execute) -> None:
    """Its last attempt may have reached the provider with the old inputs: settle it first."""
    amount = [5]
    calls: list[int] = []

    @tool(kind="effect", name="moving-pay", reconcile=examples.simulators.provider_lookup)
    def pay(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        calls.append(amount)
        raise TimeoutError("no answer from the provider")

    @agent("moving-test", tools=[pay])
    def body(ctx, inputs):
        return ctx.call(pay, step="pay", amount=amount[0])

    try:
        run = transitions.run_start(agent="moving-test", inputs={})
        assert execute(run.run_id).status == "failed"
        transitions.run_resume(by="test", reason="resume", seen_version=None, run_id=run.run_id)
        amount[0] = 7
        outcome = execute(run.run_id)
    finally:
        registry.unregister_agent("moving-test")
    assert (outcome.status, outcome.reason, outcome.step_id) == ("needs_attention", "stale", "pay")
    assert calls == [5]
    assert steps(run.run_id)["pay"].status == "failed"
