"""Async agents on PostgreSQL: every case run for a sync agent and its async twin
(``tests.support.async_agents``), which must write the same ledger — the same step ids, input
hashes, effect keys, attempts and links — and recover the same way. Then what only async code
can get wrong: a sync tool off the loop, connections given back while a run waits, and a
coroutine where a value was expected."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from harness.unannounced import start_unannounced
from ledger import transitions
from ledger.agents import agent, tool
from ledger.engine import aio
from ledger.errors import AgentDefinitionError
from ledger.examples.agents import refund_charge
from ledger.examples.models import ProviderCharge
from ledger.models import Gate, Run, Step
from ledger.processes.deploy_check import deploy_check
from ledger.processes.execute import arun_execute
from ledger.processes.preview import preview_resume
from tests.support import async_agents as twins

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = {"sync": "twin_sync", "async": "twin_async"}


@pytest.fixture(autouse=True)
def _fresh_twins() -> Any:
    twins.THREADS.clear()
    twins.FLAKY["fails"] = 0
    yield
    twins.FLAKY["fails"] = 0


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def start(kind: str, run_id: str = "twin_run", **inputs: Any) -> Run:
    return start_unannounced(agent=KINDS[kind], inputs={"sku": "abc", **inputs}, run_id=run_id)


def ledger(run_id: str) -> list[tuple[Any, ...]]:
    """A run's rows as both kinds must write them (the effect key names the run: cut it)."""
    return [
        (
            s.step_id,
            s.kind,
            s.status,
            s.input_hash,
            s.attempt,
            s.next_step_id,
            (s.effect_key or "").removeprefix(f"{run_id}:"),
        )
        for s in Step.objects.filter(run_id=run_id).order_by("seq")
    ]


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "charge"}


# --- the same ledger ---------------------------------------------------------------------------


def test_a_sync_agent_and_its_async_twin_write_the_same_ledger(execute) -> None:
    outcomes = {k: execute(start(k, run_id=f"twin_{k}").run_id) for k in KINDS}
    assert {k: o.status for k, o in outcomes.items()} == {"sync": "succeeded", "async": "succeeded"}
    assert comparable(outcomes["sync"].result) == comparable(outcomes["async"].result)
    rows = {k: ledger(f"twin_{k}") for k in KINDS}
    assert rows["sync"] == rows["async"]
    assert [r[0] for r in rows["async"]] == [
        "price",
        "at",
        "id",
        "r",
        "ask",
        "fan.p",
        "fan.s",
        "flaky",
        "charge",
    ]
    assert [r[1] for r in rows["async"]] == [
        "read",
        "clock",
        "clock",
        "clock",
        "model",
        "read",
        "read",
        "read",
        "effect",
    ]
    assert rows["async"][-1][-1] == "charge"  # the effect key: <run id>:charge
    assert ProviderCharge.objects.count() == 2  # one charge per run


def test_a_resume_replays_every_step_without_executing_any(kind, execute, clock) -> None:
    run = start(kind)
    first = execute(run.run_id)
    calls = {name: len(seen) for name, seen in twins.THREADS.items()}
    Run.objects.filter(pk=run.run_id).update(status="needs_attention")
    transitions.run_resume(by="test", reason="again", seen_version=None, run_id=run.run_id)
    again = execute(run.run_id)
    assert (again.status, again.replayed, again.executed) == ("succeeded", 9, 0)
    assert again.result == first.result
    assert {name: len(seen) for name, seen in twins.THREADS.items()} == calls
    assert ProviderCharge.objects.count() == 1


# --- crash and resume ----------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["charge.before_effect", "charge.after_effect"])
def test_a_crash_around_the_effect_is_reconciled_and_charges_once(
    kind, point, execute, crash_at
) -> None:
    baseline = execute(start(kind, run_id="baseline").run_id).result
    run = start(kind)
    crash_at(point)
    execute(run.run_id, crash_expected=True)
    assert Step.objects.get(run=run, step_id="charge").status == "started"
    outcome = execute(run.run_id, worker="worker-2")
    assert outcome.status == "succeeded", outcome
    assert comparable(outcome.result) == comparable(baseline)
    charge = Step.objects.get(run=run, step_id="charge")
    # After the effect: the lookup settled it (one attempt); before: sent again under its key.
    assert charge.attempt == (1 if point == "charge.after_effect" else 2)
    assert ProviderCharge.objects.filter(idempotency_key=f"{run.run_id}:charge").count() == 1


def test_a_crash_inside_a_fan_out_reruns_only_the_unfinished_sibling(
    kind, execute, crash_at
) -> None:
    run = start(kind)
    crash_at("twin.price.xabc")  # the sibling fan.p dies; fan.s finishes or never starts
    execute(run.run_id, crash_expected=True)
    assert not Step.objects.filter(run=run, step_id="fan.p").exists()
    outcome = execute(run.run_id, worker="worker-2")
    assert outcome.status == "succeeded", outcome
    assert outcome.result["both"] == {
        "s": {"sku": "abc", "stock": 3},
        "p": {"sku": "xabc", "cents": 400},
    }
    stock = twins.THREADS.get("stock", []) + twins.THREADS.get("stock_sync", [])
    assert len(stock) == 1  # executed once in all: a sibling that finished was replayed
    assert len(twins.THREADS["price"]) == 3  # price, the crashed fan.p, fan.p again
    fan = Step.objects.filter(run=run, step_id__startswith="fan.")
    assert {(s.step_id, s.status, s.attempt) for s in fan} == {
        ("fan.p", "succeeded", 1),
        ("fan.s", "succeeded", 1),
    }


# --- retries, gates, pauses, continue-as-new ---------------------------------------------------


def test_a_flaky_read_is_retried_with_back_off(kind, execute, clock) -> None:
    twins.FLAKY["fails"] = 2
    outcome = execute(start(kind).run_id)
    assert outcome.status == "succeeded", outcome
    assert clock.slept == [1.0, 2.0]
    flaky = Step.objects.get(step_id="flaky")
    assert (flaky.attempt, len(flaky.errors)) == (3, 2)
    assert "ConnectionError" in flaky.errors[0]["type"]


def test_a_long_back_off_releases_the_run_and_the_wake_retries(
    kind, execute, clock, settings
) -> None:
    settings.RUNLEDGER_RETRY_SLEEP_MAX_SECONDS = 0.5
    twins.FLAKY["fails"] = 1
    run = start(kind)
    released = execute(run.run_id)
    assert (released.status, released.reason, released.step_id) == ("queued", "backoff", "flaky")
    run.refresh_from_db()
    assert run.wake_at is not None and run.lease_token is None
    clock.advance(2)
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    assert Step.objects.get(step_id="flaky").attempt == 2


def test_a_gated_effect_waits_for_approval_then_is_sent_once(
    kind, execute, clock, django_user_model
) -> None:
    run = start(kind, gated=True)
    stopped = execute(run.run_id)
    assert (stopped.status, stopped.reason, stopped.step_id) == (
        "needs_attention",
        "approval",
        "charge",
    )
    assert not Step.objects.filter(run=run, step_id="charge").exists()
    assert ProviderCharge.objects.count() == 0
    gate = Gate.objects.get(run=run)
    bob = django_user_model.objects.create_user(username="bob")
    transitions.gate_approve(gate=gate, by=bob, reason="ok", clock=clock)
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    gate.refresh_from_db()
    assert gate.status == "used"
    assert ProviderCharge.objects.count() == 1


def test_a_paused_tool_holds_the_run_until_the_pause_is_lifted(kind, execute, clock) -> None:
    name = "refund_charge_async" if kind == "async" else "refund_charge"
    pause = transitions.pause_create(
        scope="tool", target=name, by="cli:ops", reason="provider down", clock=clock
    )
    run = start(kind)
    held = execute(run.run_id)
    assert (held.status, held.step_id) == ("paused", "charge")
    assert ProviderCharge.objects.count() == 0
    transitions.pause_lift(pause_id=pause.pk, by="cli:ops", reason="back", clock=clock)
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    assert ProviderCharge.objects.count() == 1


def test_continue_as_new_carries_the_effects_into_a_queued_run(kind, execute) -> None:
    run = start(kind, more=True)
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded" and outcome.continued_as
    child = Run.objects.get(pk=outcome.continued_as)
    assert (child.status, child.agent, child.parent_id) == ("queued", KINDS[kind], run.run_id)
    assert child.inputs["carried"] == {"charge": f"{run.run_id}:charge"}


# --- dry replay and deploy check ---------------------------------------------------------------


def test_the_dry_replay_and_the_deploy_check_judge_both_kinds_alike(execute, crash_at) -> None:
    previews = {}
    for k in KINDS:
        run = start(k, run_id=f"twin_{k}")
        crash_at("charge.after_effect")
        execute(run.run_id, crash_expected=True)
        preview = preview_resume(run_id=run.run_id)
        previews[k] = [(s.step_id, s.action) for s in preview.steps]
        assert preview.error == "" and not preview.finished
    assert previews["sync"] == previews["async"]
    assert previews["async"][-1] == ("charge", "settle")
    assert previews["async"][0] == ("price", "replay")
    verdicts = {v.run_id: (v.verdict, v.step_id) for v in deploy_check()}
    assert verdicts == {"twin_sync": ("replay", ""), "twin_async": ("replay", "")}


def test_the_dry_replay_of_an_async_agent_that_awaits_something_else_stops_there(
    execute,
) -> None:
    @agent("awaits_a_sleep")
    async def awaits_a_sleep(ctx: Any, inputs: Any) -> Any:
        await ctx.call(twins.price, step="p", sku="a")
        await asyncio.sleep(0.01)
        return await ctx.call(twins.price, step="q", sku="b")

    run = start_unannounced(agent="awaits_a_sleep", inputs={})
    assert execute(run.run_id).status == "succeeded"
    preview = preview_resume(run_id=run.run_id)
    assert [(s.step_id, s.action) for s in preview.steps] == [("p", "replay")]
    assert "awaits something other than its run context" in preview.stopped


# --- what only async code can get wrong ---------------------------------------------------------


def test_a_sync_tool_runs_off_the_loop_and_an_async_one_on_it(execute) -> None:
    assert execute(start("async").run_id).status == "succeeded"
    loop_thread = aio.shared_loop() and "runledger-async-loop"
    assert twins.THREADS["price"] and loop_thread not in twins.THREADS["price"]
    assert set(twins.THREADS["stock"]) == {loop_thread}


def test_a_run_waiting_in_a_tool_holds_no_database_connection(execute) -> None:
    twins.BACKENDS.clear()
    run = start_unannounced(agent="held_connections", inputs={})
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    # While the tool awaited, the only connection to the database was the one counting: the
    # worker's thread and the ledger thread that wrote the step before had given theirs back.
    assert twins.BACKENDS == [1]


def test_the_async_entry_point_runs_the_agent_on_the_callers_loop(clock) -> None:
    run = start("async")

    async def main() -> Any:
        return await arun_execute(
            run_id=run.run_id, worker="w", clock=clock, heartbeat=False, sleep=clock.sleep
        )

    outcome = asyncio.run(main())
    assert outcome is not None and outcome.status == "succeeded"
    assert "runledger-async-loop" not in twins.THREADS["stock"]  # the caller's loop, not ours


def test_async_definitions_where_a_sync_one_is_required_are_refused_at_registration() -> None:
    with pytest.raises(AgentDefinitionError, match="plain def but its tool 'stock' is an async"):

        @agent("sync_with_async_tool", tools=[twins.stock])
        def bad(ctx: Any, inputs: Any) -> Any:
            return None

    async def keys(prefix: str) -> list[str]:
        return []

    with pytest.raises(AgentDefinitionError, match=r"list_keys .* not an async def"):

        @tool(kind="effect", list_keys=keys)
        def send(*, idempotency_key: str) -> None:
            return None

    async def title(inputs: Any) -> str:
        return ""

    with pytest.raises(AgentDefinitionError, match=r"title .* not an async def"):
        agent("async_title", title=title)

    with pytest.raises(AgentDefinitionError, match="generator"):

        @agent("generator_agent")
        async def gen(ctx: Any, inputs: Any) -> Any:
            yield 1


def _failing(name: str, fn: Any) -> Any:
    agent(name)(fn)
    return start_unannounced(agent=name, inputs={})


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
@pytest.mark.parametrize(
    "case",
    ["not_awaited", "gathered", "argument", "result", "async_tool_in_sync_agent"],
)
def test_a_coroutine_where_a_value_is_expected_fails_the_run_with_a_named_error(
    case, execute
) -> None:
    async def not_awaited(ctx: Any, inputs: Any) -> Any:
        ctx.call(twins.price, step="p", sku="a")  # no await
        return 1

    async def gathered(ctx: Any, inputs: Any) -> Any:
        return await asyncio.gather(
            ctx.call(twins.price, step="p", sku="a"), ctx.call(twins.price, step="q", sku="b")
        )

    async def argument(ctx: Any, inputs: Any) -> Any:
        return await ctx.call(twins.price, step="p", sku=twins.stock(sku="a"))

    async def result(ctx: Any, inputs: Any) -> Any:
        return twins.stock(sku="a")

    def async_tool_in_sync_agent(ctx: Any, inputs: Any) -> Any:
        return ctx.call(twins.stock, step="s", sku="a")

    fn = locals()[case]
    run = _failing(f"coroutine_{case}", fn)
    outcome = execute(run.run_id)
    assert outcome.status == "failed"
    assert "await" in outcome.detail and "not JSON" not in outcome.detail, outcome.detail
    assert not Step.objects.filter(run=run, status="failed").exists()  # no step failed for it
    assert EXPECTED[case] in outcome.detail


EXPECTED = {
    "not_awaited": "step 'p' was made and never awaited",
    "gathered": "was made before step 'p' was awaited",
    "argument": "$.sku is a coroutine, not a value",
    "result": "is a coroutine, not a value",
    "async_tool_in_sync_agent": "tool 'stock' is an async def: a sync agent cannot call it",
}


def test_a_sync_tool_returning_a_coroutine_fails_its_step_with_a_named_error(execute) -> None:
    @tool(kind="read", name="returns_coroutine", retries=2)
    def returns_coroutine() -> Any:
        return twins.stock(sku="a")  # an async def called without await

    @agent("coroutine_result_tool", tools=[returns_coroutine])
    def uses(ctx: Any, inputs: Any) -> Any:
        return ctx.call(returns_coroutine, step="c")

    outcome = execute(start_unannounced(agent="coroutine_result_tool", inputs={}).run_id)
    assert outcome.status == "failed"
    step = Step.objects.get(step_id="c")
    assert step.attempt == 1  # a definition error is not retried
    assert step.error.startswith("NotAwaited:") and "not JSON" not in step.error


def test_the_sync_engine_does_not_import_the_loop_for_sync_agents() -> None:
    assert not inspect.iscoroutinefunction(refund_charge.fn)
    assert refund_charge.is_async is False and twins.stock.is_async is True


def test_batched_durability_writes_the_same_ledger_for_an_async_agent(execute) -> None:
    agent("twin_async_batched", tools=twins.twin_async.tools, durability="batched")(
        twins.twin_async.fn
    )
    sync = execute(start("sync", run_id="twin_sync").run_id)
    batched = execute(
        start_unannounced(agent="twin_async_batched", inputs={"sku": "abc"}, run_id="twin_b").run_id
    )
    assert (sync.status, batched.status) == ("succeeded", "succeeded")
    assert ledger("twin_b") == ledger("twin_sync")


def test_an_async_lookup_answers_the_operators_ask_and_the_effect_audit(
    execute, crash_at, django_user_model
) -> None:
    from ledger.processes.effect_audit import audit_effects
    from ledger.transitions.settle import step_reconcile_again

    run = start("async")
    crash_at("charge.after_effect")
    execute(run.run_id, crash_expected=True)
    step = Step.objects.get(run=run, step_id="charge")
    alice = django_user_model.objects.create_user(username="alice")
    answer = step_reconcile_again(step=step, by=alice)
    assert answer.outcome == "happened", answer.detail
    assert answer.result["customer"] == "cus_ada"
    assert execute(run.run_id, worker="worker-2").status == "succeeded"
    audit = audit_effects(agent="twin_async", sleep=lambda s: None)
    assert (audit.checked, audit.unanswered) == (1, 0)
