"""PydanticAI agents on the ledger (``ledger.adapters.pydantic_ai``), offline: the example
refund desk (``ledger.examples.pydantic_agents``) on PydanticAI's ``FunctionModel``.

Every test asserts the ledger after the act and the simulators' tables (how often each effect
happened); the model's own calls are counted by a fault-point hook inside the model function.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from django.db import connection

from harness import faults
from harness.cluster import Cluster, wait_for
from ledger import registry, transitions
from ledger.adapters.pydantic_ai import run_agent
from ledger.agents import Tool, agent
from ledger.agents import tool as ledger_tool
from ledger.errors import AgentDefinitionError
from ledger.examples import pydantic_agents
from ledger.examples.models import Notification, ProviderCharge
from ledger.examples.pydantic_agents import TOOLS
from ledger.models import Run, Step
from ledger.processes.deploy_check import changed_inputs
from ledger.processes.preview import preview_resume
from ledger.states import StepKind
from runs.operations.tasks import start_run

pytestmark = pytest.mark.django_db(transaction=True)

assert connection  # the skipif conditions read it
MODULES = "ledger.examples.agents,ledger.examples.pydantic_agents"
INVOICES = ["inv_1001", "inv_1003"]
EXPECTED_STEPS = {
    "agent.turn.1": "model",
    "agent.turn.1.tools.0.fetch_invoice": "read",
    "agent.turn.1.tools.1.fetch_invoice": "read",
    "agent.turn.2": "model",
    "agent.turn.2.tools.0.refund_charge": "effect",
    "agent.turn.2.tools.1.refund_charge": "effect",
    "agent.turn.3": "model",
    "agent.turn.3.tools.0.notify_team": "effect",
    "agent.turn.4": "model",
}
ANSWER = {"text": "Refunded 2 invoices and told #billing."}
#: The ledger-@tool agent, and the PydanticAI agent as written (sync and async ledger agents).
AGENTS = ["refund_pydantic_ai", "refund_pydantic_ai_native", "refund_pydantic_ai_native_async"]


@pytest.fixture
def asked() -> Iterator[Counter[int]]:
    """How often the scripted model was really asked, by turn (a hook at its fault point)."""
    counts: Counter[int] = Counter()
    faults.set_hook("pai.model", lambda: counts.update([len(counts) + 1]))
    yield counts
    faults.clear_hooks()


def start(name: str = "refund_pydantic_ai") -> str:
    return transitions.run_start(agent=name, inputs={"invoice_ids": INVOICES}).run_id


def rows(run_id: str) -> dict[str, Step]:
    return {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}


def test_a_pydantic_ai_agent_runs_each_request_and_tool_call_as_a_step(
    execute: Any, asked: Counter[int]
) -> None:
    run_id = start()
    outcome = execute(run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result == ANSWER
    ledger = rows(run_id)
    assert {k: r.kind for k, r in ledger.items()} == EXPECTED_STEPS
    assert all(r.status == "succeeded" and r.attempt == 1 for r in ledger.values())
    refund = ledger["agent.turn.2.tools.0.refund_charge"]
    assert refund.effect_key == f"{run_id}:agent.turn.2.tools.0.refund_charge"
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}
    assert sum(asked.values()) == 4
    assert ProviderCharge.objects.count() == 2 and Notification.objects.count() == 1


@pytest.fixture
def asked_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the scripted model appends each turn it is really asked to (any process)."""
    log = tmp_path / "asked.log"
    monkeypatch.setenv("RUNLEDGER_EXAMPLE_ASKED", str(log))
    return log


def asks(log: Path) -> dict[int, int]:
    if not log.exists():
        return {}
    return dict(Counter(int(line) for line in log.read_text().split()))


def test_a_finished_agent_replays_without_asking_the_model_again(
    execute: Any, asked_log: Path
) -> None:
    run_id = start()
    first = execute(run_id)
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(run_id=run_id, by="test", reason="replay", seen_version=None)
    again = execute(run_id, worker="worker-2")
    assert again.status == "succeeded" and again.result == first.result == ANSWER
    assert again.replayed == len(EXPECTED_STEPS) and again.executed == 0
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert ProviderCharge.objects.count() == 2 and Notification.objects.count() == 1


def test_a_changed_system_prompt_between_crash_and_resume_is_a_stale_model_step(
    execute: Any, crash_at: Any, monkeypatch: pytest.MonkeyPatch, asked_log: Path
) -> None:
    monkeypatch.setenv("RUNLEDGER_EXAMPLE_PROMPT", "2")
    run_id = start()
    crash_at("charge.after_effect")
    execute(run_id, crash_expected=True)
    monkeypatch.setenv("RUNLEDGER_EXAMPLE_PROMPT", "1")  # a deploy between crash and resume
    outcome = execute(run_id, worker="worker-2")
    run = Run.objects.get(pk=run_id)
    assert outcome.status == "needs_attention" and run.reason == "stale", run.detail
    assert run.blocked_step_id == "agent.turn.1"
    # The dry replay the run page shows it with gives the diff: the instructions, nothing else.
    preview = preview_resume(run_id=run_id, seconds=30)
    stale = next(s for s in preview.steps if s.step_id == "agent.turn.1")
    assert stale.action == "stale", preview
    assert changed_inputs(stale.stored_inputs, stale.current_inputs) == [
        "messages[0].instructions",
        "parameters.instruction_parts[0].content",
    ]
    assert asks(asked_log) == {1: 1, 2: 1}  # nothing asked again under the new prompt
    # Turn 2's refunds are one fan-out: the sibling of the crashed one may have been sent too,
    # each once, under its own key; nothing was sent again under the new prompt.
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert 1 <= len(charges) <= 2 and set(charges.values()) == {1}, charges


def test_the_tool_definitions_are_in_the_model_steps_hash(execute: Any) -> None:
    run_id = start()
    assert execute(run_id).status == "succeeded"
    request = Step.objects.get(run_id=run_id, step_id="agent.turn.1").inputs
    tools = {t["name"]: t for t in request["parameters"]["function_tools"]}
    assert set(tools) == {"fetch_invoice", "refund_charge", "notify_team"}
    assert tools["refund_charge"]["parameters_json_schema"]["required"] == [
        "customer",
        "amount_cents",
    ]
    assert "idempotency_key" not in str(tools)  # the engine's, never the model's
    assert "timestamp" not in str(request) and "run_id" not in str(request)


# --- a real Celery worker SIGKILLed ----------------------------------------------------------


def settled(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status not in ("queued", "running")


def effects_once() -> None:
    """Each refund and the team's note happened exactly once (one row per key)."""
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert sorted(ProviderCharge.objects.values_list("amount_cents", flat=True)) == [-4200, -990]
    assert Notification.objects.count() == 1


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    "kill_at",
    [
        "charge.after_effect",  # (a) a refund sent, its result not committed
        "pai.model@2",  # (b) inside the second model request
        "pydantic_ai.before_request@3",  # (c) turn 2's refunds committed, turn 3 not asked
    ],
)
@pytest.mark.parametrize("name", AGENTS)
def test_a_celery_worker_killed_mid_agent_resumes_asking_once_and_sending_once(
    name: str, kill_at: str, tmp_path: Path, asked_log: Path
) -> None:
    """The whole `celery -A runs worker` dies at the point; a second worker and beat's sweep
    recover the run: each model request asked once, each effect sent once, the same output.
    The agents: ledger @tools, and the PydanticAI agent as written (its own @agent.tool with
    deps, an async tool, a FunctionToolset, effects named in run_agent), sync and async."""
    env = {"RUNLEDGER_AGENT_MODULES": MODULES, "RUNLEDGER_EXAMPLE_ASKED": str(asked_log)}
    with Cluster(tmp_path / "cluster", lease_seconds=2, sweep_seconds=0.5, env=env) as cluster:
        run_id = start(name)
        victim = cluster.worker(
            "victim", env={"RUNLEDGER_KILL_AT": kill_at, "RUNLEDGER_KILL_SCOPE": "group"}
        )
        cluster.send(start_run, run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=90), cluster.log("victim")
        assert Run.objects.get(pk=run_id).status == "running"
        before = rows(run_id)
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: settled(run_id), timeout=120), cluster.log("rescuer")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.executions, run.resume_count) == ("succeeded", 2, 1), run.detail
    assert run.result == ANSWER
    after = rows(run_id)
    assert {k: r.kind for k, r in after.items()} == EXPECTED_STEPS
    for step_id, row in before.items():  # what had finished replayed untouched
        if row.status == "succeeded":
            assert (after[step_id].attempt, after[step_id].result) == (row.attempt, row.result)
    # A model request killed in flight was never answered, so it is asked on the resume: once
    # answered, no request is asked again.
    assert asks(asked_log) == {1: 1, 2: 2 if kill_at == "pai.model@2" else 1, 3: 1, 4: 1}
    effects_once()
    connection.close()


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize("name", AGENTS)
def test_a_worker_killed_inside_the_effect_without_a_lookup_stops_the_run_for_a_person(
    name: str, tmp_path: Path, asked_log: Path
) -> None:
    env = {"RUNLEDGER_AGENT_MODULES": MODULES, "RUNLEDGER_EXAMPLE_ASKED": str(asked_log)}
    with Cluster(tmp_path / "cluster", lease_seconds=2, sweep_seconds=0.5, env=env) as cluster:
        run_id = start(name)
        victim = cluster.worker(
            "victim",
            env={"RUNLEDGER_KILL_AT": "notify.after_effect", "RUNLEDGER_KILL_SCOPE": "group"},
        )
        cluster.send(start_run, run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=90), cluster.log("victim")
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: settled(run_id), timeout=120), cluster.log("rescuer")
    run = Run.objects.get(pk=run_id)
    assert run.status == "needs_attention", run.detail
    assert run.blocked_step_id == "agent.turn.3.tools.0.notify_team", run.detail
    note = Step.objects.get(run_id=run_id, step_id="agent.turn.3.tools.0.notify_team")
    assert note.status == "started"  # the intent, no result: nobody can know if it was sent
    assert Notification.objects.count() == 1  # it was sent once, and not again
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1}
    connection.close()


# --- bad input ----------------------------------------------------------------------------------


def test_a_pydantic_ai_outside_the_pinned_range_is_refused() -> None:
    from ledger.adapters.pydantic_ai import check_version

    check_version("2.68.0")
    for version in ("1.9.0", "3.0.0", "dev"):
        with pytest.raises(AgentDefinitionError, match=r">=2,<3.*runledger\[pydantic-ai\]"):
            check_version(version)


def refused_run(execute: Any, body: Any) -> Any:
    """Run an agent whose body calls ``run_agent`` wrongly: it fails, and writes no step."""
    agent("pai-bad", tools=TOOLS)(body)
    try:
        run_id = transitions.run_start(agent="pai-bad", inputs={}).run_id
        outcome = execute(run_id)
        assert outcome.status == "failed", outcome
        assert not Step.objects.filter(run_id=run_id).exists()  # nothing half-written
        return outcome
    finally:
        registry.unregister_agent("pai-bad")


def test_a_tool_that_is_not_a_ledger_tool_is_refused_naming_it(execute: Any) -> None:
    def plain(order_id: str) -> dict[str, Any]:
        return {}

    run = refused_run(
        execute,
        lambda ctx, inputs: run_agent(ctx, pydantic_agents.refund_desk(), "hi", tools=[plain]),
    )
    assert "takes ledger @tool functions" in run.detail and "plain" in run.detail


def test_an_effect_without_an_idempotency_key_parameter_is_refused(execute: Any) -> None:
    keyless = Tool(name="keyless", kind=StepKind.EFFECT, fn=lambda amount: amount)
    run = refused_run(
        execute,
        lambda ctx, inputs: run_agent(ctx, pydantic_agents.refund_desk(), "hi", tools=[keyless]),
    )
    assert "effect tool 'keyless' has no idempotency_key parameter" in run.detail


def test_an_agent_with_tools_of_its_own_runs_them_beside_the_ledger_tools(execute: Any) -> None:
    """``@agent.tool_plain`` beside ``run_agent(tools=...)``: both are offered to the model (the
    agent's own tool a read step when called; here the scripted model never calls it)."""

    def body(ctx: Any, inputs: Any) -> Any:
        own = pydantic_agents.refund_desk()

        @own.tool_plain
        def shadow_refund(amount: int) -> int:
            return amount

        return run_agent(ctx, own, "Please refund invoices inv_1001.", tools=TOOLS)

    agent("pai-own", tools=TOOLS)(body)
    try:
        run_id = transitions.run_start(agent="pai-own", inputs={}).run_id
        outcome = execute(run_id)
    finally:
        registry.unregister_agent("pai-own")
    assert outcome.status == "succeeded", outcome
    request = Step.objects.get(run_id=run_id, step_id="agent.turn.1").inputs
    offered = {t["name"] for t in request["parameters"]["function_tools"]}
    assert offered == {"fetch_invoice", "refund_charge", "notify_team", "shadow_refund"}


def test_a_tool_result_that_is_not_json_fails_at_its_step(execute: Any) -> None:
    @ledger_tool(kind="read")
    def fetch_invoice(invoice_id: str) -> Any:
        return {1, 2}  # a set: not JSON

    @agent("pai-notjson", tools=[fetch_invoice])
    def body(ctx: Any, inputs: Any) -> Any:
        return run_agent(
            ctx, pydantic_agents.refund_desk(), "Refund inv_1001.", tools=[fetch_invoice]
        )

    try:
        run_id = transitions.run_start(agent="pai-notjson", inputs={}).run_id
        outcome = execute(run_id)
    finally:
        registry.unregister_agent("pai-notjson")
    assert outcome.status == "failed", outcome
    assert "fetch_invoice" in outcome.detail and "a set is not JSON" in outcome.detail
    steps = {s.step_id: s.status for s in Step.objects.filter(run_id=run_id)}
    assert steps.get("agent.turn.1") == "succeeded"
    assert steps.get("agent.turn.1.tools.0.fetch_invoice") in (None, "failed"), steps


# --- approval gates -----------------------------------------------------------------------------


def test_a_tool_that_needs_approval_stops_the_run_at_its_gate_until_a_person_approves(
    execute: Any, people: Any, clock: Any, asked_log: Path
) -> None:
    from ledger.examples import agents as examples
    from ledger.examples import simulators
    from ledger.models import Gate

    @ledger_tool(kind="effect", reconcile=simulators.provider_lookup, approval=True)
    def refund_charge(customer: str, amount_cents: int, *, idempotency_key: str) -> Any:
        return examples.refund_charge.fn(
            customer=customer, amount_cents=amount_cents, idempotency_key=idempotency_key
        )

    gated = [examples.fetch_invoice, refund_charge, examples.notify_team]

    @agent("pai-gated", tools=gated)
    def body(ctx: Any, inputs: Any) -> Any:
        prompt = "Please refund invoices inv_1001, inv_1003."
        return {"text": run_agent(ctx, pydantic_agents.refund_desk(), prompt, tools=gated)}

    try:
        run_id = transitions.run_start(agent="pai-gated", inputs={}).run_id
        outcome = execute(run_id)
        stops = []
        while outcome.status == "needs_attention" and outcome.reason == "approval":
            stops.append(outcome.step_id)
            assert not Step.objects.filter(run_id=run_id, step_id=outcome.step_id).exists()
            gate = Gate.objects.get(run_id=run_id, status="waiting")
            transitions.gate_approve(gate=gate, by=people.bob, reason="checked", clock=clock)
            outcome = execute(run_id)
    finally:
        registry.unregister_agent("pai-gated")
        # The gated stand-in took the example tool's name in the registry: put the example's
        # (with its list_keys, which the effect audit asks) back for the tests that follow.
        registry._tools[examples.refund_charge.name] = examples.refund_charge
    assert outcome.status == "succeeded", outcome
    assert outcome.result == ANSWER
    assert stops == [
        "agent.turn.2.tools.0.refund_charge",
        "agent.turn.2.tools.1.refund_charge",
    ]
    gates = Gate.objects.filter(run_id=run_id).order_by("pk")
    assert [(g.status, g.arguments_text) for g in gates] == [
        ("used", '{"amount_cents":4200,"customer":"cus_ada"}'),
        ("used", '{"amount_cents":990,"customer":"cus_linus"}'),
    ]
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}  # the stops asked the model nothing again
    effects_once()


# --- structured output and retries --------------------------------------------------------------


def test_structured_output_and_its_retry_are_pydantic_ais_own_and_replay_the_same(
    execute: Any,
) -> None:
    from pydantic import BaseModel
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    class Verdict(BaseModel):
        decision: str
        amount_cents: int

    answers: list[int] = []

    def model(messages: list[Any], info: Any) -> ModelResponse:
        answers.append(len(messages))
        name = info.output_tools[0].name
        if len(messages) == 1:  # not what the output type asks for: PydanticAI retries
            return ModelResponse(parts=[ToolCallPart(name, {"decision": "approve"})])
        return ModelResponse(
            parts=[ToolCallPart(name, {"decision": "approve", "amount_cents": 42})]
        )

    judge = PydanticAgent(FunctionModel(model), output_type=Verdict, instructions="Decide.")

    @agent("pai-structured")
    def body(ctx: Any, inputs: Any) -> Any:
        return run_agent(ctx, judge, "Refund inv_1001?")

    try:
        run_id = transitions.run_start(agent="pai-structured", inputs={}).run_id
        first = execute(run_id)
        Run.objects.filter(pk=run_id).update(status="failed")
        transitions.run_resume(run_id=run_id, by="test", reason="replay", seen_version=None)
        again = execute(run_id, worker="worker-2")
    finally:
        registry.unregister_agent("pai-structured")
    assert first.status == "succeeded", first
    assert first.result == again.result == {"decision": "approve", "amount_cents": 42}
    assert dict(Step.objects.filter(run_id=run_id).values_list("step_id", "kind")) == {
        "agent.turn.1": "model",
        "agent.turn.2": "model",  # the retry: its own model step
    }
    retry = Step.objects.get(run_id=run_id, step_id="agent.turn.2").inputs["messages"][-1]
    (part,) = retry["parts"]  # PydanticAI 2's retry: the output tool's return, "retried"
    assert (part["outcome"], part["retry"]["cause"]) == ("retried", "validation_error"), part
    assert answers == [1, 3]  # asked twice in all: the replay asked nothing
