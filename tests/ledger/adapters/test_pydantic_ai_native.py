"""A PydanticAI agent as its docs write it, run by ``run_agent``: tools of its own
(``@agent.tool`` with ``RunContext[Deps]``, an ``async def`` tool, a ``FunctionToolset``), the
effects named in ``effects=`` and keyed with ``effect_key()``, on a sync and an async ledger
agent (``ledger.examples.pydantic_agents.refund_pydantic_ai_native[_async]``), offline on
PydanticAI's ``FunctionModel`` / ``TestModel``. A real worker SIGKILLed is in
``test_pydantic_ai.py``'s kill tests.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import ModelRetry
from pydantic_ai import RunContext as PaiRunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import FunctionToolset

from ledger import registry, transitions
from ledger.adapters.pydantic_ai import effect_key, run_agent
from ledger.agents import agent
from ledger.errors import AgentDefinitionError
from ledger.examples import pydantic_agents
from ledger.examples.models import Notification, ProviderCharge
from ledger.models import Run, Step

pytestmark = pytest.mark.django_db(transaction=True)

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
AGENTS = ["refund_pydantic_ai_native", "refund_pydantic_ai_native_async"]


@pytest.fixture
def asked_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "asked.log"
    monkeypatch.setenv("RUNLEDGER_EXAMPLE_ASKED", str(log))
    return log


def asks(log: Path) -> dict[int, int]:
    return dict(Counter(int(line) for line in log.read_text().split())) if log.exists() else {}


def start(name: str) -> str:
    return transitions.run_start(
        agent=name, inputs={"invoice_ids": ["inv_1001", "inv_1003"]}
    ).run_id


@pytest.mark.parametrize("name", AGENTS)
def test_an_agent_with_its_own_tools_and_deps_runs_each_call_as_a_step(
    name: str, execute: Any, asked_log: Path
) -> None:
    run_id = start(name)
    outcome = execute(run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result == ANSWER
    rows = {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}
    assert {k: r.kind for k, r in rows.items()} == EXPECTED_STEPS
    refund = rows["agent.turn.2.tools.0.refund_charge"]
    # The effect's key reached the tool through effect_key(): it is the provider's key.
    assert refund.effect_key == f"{run_id}:agent.turn.2.tools.0.refund_charge"
    assert ProviderCharge.objects.filter(idempotency_key=refund.effect_key).count() == 1
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}  # no deps in it
    assert rows["agent.turn.1.tools.0.fetch_invoice"].result["customer"] == "cus_ada"
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert ProviderCharge.objects.count() == 2 and Notification.objects.count() == 1


@pytest.mark.parametrize("name", AGENTS)
def test_a_resume_replays_the_tool_calls_without_running_them(
    name: str, execute: Any, asked_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = start(name)
    first = execute(run_id)
    ran: list[str] = []
    billing_refund = pydantic_agents.Billing.refund

    def counted(self: Any, *args: Any) -> Any:
        ran.append("refund")
        return billing_refund(self, *args)

    monkeypatch.setattr(pydantic_agents.Billing, "refund", counted)
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(
        run_id=run_id, by="test", reason="replay", seen_version=None, anyway=True
    )
    again = execute(run_id, worker="worker-2")
    assert again.status == "succeeded" and again.result == first.result == ANSWER
    assert again.replayed == len(EXPECTED_STEPS) and again.executed == 0
    assert ran == []  # no tool ran again, the deps were rebuilt and never used
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert ProviderCharge.objects.count() == 2 and Notification.objects.count() == 1


def test_a_crash_after_an_effect_looks_it_up_and_sends_nothing_again(
    execute: Any, crash_at: Any, asked_log: Path
) -> None:
    run_id = start("refund_pydantic_ai_native")
    crash_at("charge.after_effect")
    execute(run_id, crash_expected=True)
    outcome = execute(run_id, worker="worker-2")
    assert outcome.status == "succeeded" and outcome.result == ANSWER, outcome
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}


def run_body(execute: Any, body: Any, name: str = "pai-native") -> tuple[Any, dict[str, Any]]:
    agent(name)(body)
    try:
        run_id = transitions.run_start(agent=name, inputs={}).run_id
        outcome = execute(run_id)
    finally:
        registry.unregister_agent(name)
    return outcome, {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}


def test_a_tool_plain_a_model_retry_and_a_test_model_replay_the_same(execute: Any) -> None:
    calls: list[int] = []
    helper = PydanticAgent(TestModel(), name="counter")

    @helper.tool_plain
    def count(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise ModelRetry("try again")
        return n + 1

    outcome, rows = run_body(execute, lambda ctx, inputs: run_agent(ctx, helper, "count"))
    assert outcome.status == "succeeded", outcome
    assert {k: r.kind for k, r in rows.items()} == {
        "agent.turn.1": "model",
        "agent.turn.1.tools.0.count": "read",
        "agent.turn.2": "model",
        "agent.turn.2.tools.0.count": "read",
        "agent.turn.3": "model",
    }
    assert rows["agent.turn.1.tools.0.count"].result == {"$pydantic_ai.model_retry": "try again"}
    assert len(calls) == 2


def test_an_effect_key_outside_an_effect_is_refused() -> None:
    with pytest.raises(AgentDefinitionError, match="outside an effect"):
        effect_key()


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"toolsets": "team"}, "takes a list of PydanticAI toolsets"),
        ({"toolsets": [lambda: None]}, "takes PydanticAI toolsets"),
        ({"effects": ["refund_charge"]}, "maps tool names to their lookups"),
        ({"effects": {"refund_charge": 42}}, "takes a lookup function"),
        ({"effects": {"refund_chrage": None}}, "'refund_chrage', which the PydanticAI agent"),
        ({"requires_approval": ["fetch_invoice"]}, "nor named in its effects"),
    ],
)
def test_a_misused_run_agent_is_a_clear_error_before_any_step(
    kwargs: dict[str, Any], said: str, execute: Any
) -> None:
    def body(ctx: Any, inputs: Any) -> Any:
        billing = pydantic_agents.Billing(invoices={})
        return run_agent(ctx, pydantic_agents.native_desk, "hi", deps=billing, **kwargs)

    outcome, rows = run_body(execute, body)
    assert outcome.status == "failed" and said in outcome.detail, outcome.detail
    assert rows == {}  # nothing written


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("run", "was run with iter directly inside runledger run"),
        ("iter", "was run with iter directly inside runledger run"),
        ("run_stream", "streaming is not durable"),
    ],
)
def test_a_pydantic_ai_run_not_driven_by_run_agent_is_refused_at_once(
    how: str, said: str, execute: Any
) -> None:
    asked: list[int] = []

    def model(messages: list[Any], info: Any) -> ModelResponse:
        asked.append(1)
        return ModelResponse(parts=[TextPart("hi")])

    helper = PydanticAgent(FunctionModel(model))

    async def direct(ctx: Any, inputs: Any) -> Any:
        if how == "run":
            return (await helper.run("hi")).output
        if how == "iter":
            async with helper.iter("hi") as running:
                async for _ in running:
                    pass
            return None
        async with helper.run_stream("hi") as stream:
            return await stream.get_output()

    outcome, rows = run_body(execute, direct)
    assert outcome.status == "failed" and said in outcome.detail, outcome.detail
    assert asked == [] and rows == {}


def test_an_mcp_like_toolset_of_the_agent_is_a_step_too(execute: Any) -> None:
    """Any toolset the agent holds is wrapped (here a FunctionToolset given to the agent)."""
    seen: list[str] = []

    def lookup(order_id: str) -> dict[str, str]:
        seen.append(order_id)
        return {"order_id": order_id, "status": "shipped"}

    def script(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"order_id": "o1"}, "c1")])
        return ModelResponse(parts=[TextPart("shipped")])

    helper = PydanticAgent(FunctionModel(script), toolsets=[FunctionToolset([lookup])])

    @helper.tool
    def unused(ctx: PaiRunContext[None]) -> str:
        return "never"

    outcome, rows = run_body(execute, lambda ctx, inputs: run_agent(ctx, helper, "where?"))
    assert outcome.status == "succeeded" and outcome.result == "shipped", outcome
    assert rows["agent.turn.1.tools.0.lookup"].result == {"order_id": "o1", "status": "shipped"}
    assert seen == ["o1"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_effect_of_the_agents_own_that_requires_approval_waits_at_the_gate(
    kind: str, execute: Any, people: Any, clock: Any, asked_log: Path
) -> None:
    from ledger.models import Gate

    desk = pydantic_agents.native_desk
    prompt = "Please refund invoices inv_1001."
    options: dict[str, Any] = {
        "toolsets": [pydantic_agents.team],
        "effects": pydantic_agents.NATIVE_EFFECTS,
        "requires_approval": ["notify_team"],
    }

    def body(ctx: Any, inputs: Any) -> Any:
        billing = pydantic_agents.Billing(invoices=pydantic_agents.INVOICES_BY_ID)
        return run_agent(ctx, desk, prompt, deps=billing, **options)

    async def abody(ctx: Any, inputs: Any) -> Any:
        billing = pydantic_agents.Billing(invoices=pydantic_agents.INVOICES_BY_ID)
        return await run_agent(ctx, desk, prompt, deps=billing, **options)

    agent("pai-native-gate")(body if kind == "sync" else abody)
    note = "agent.turn.3.tools.0.notify_team"
    try:
        run_id = transitions.run_start(agent="pai-native-gate", inputs={}).run_id
        outcome = execute(run_id)
        assert (outcome.status, outcome.reason, outcome.step_id) == (
            "needs_attention",
            "approval",
            note,
        ), outcome
        assert not Step.objects.filter(run_id=run_id, step_id=note).exists()  # no intent yet
        gate = Gate.objects.get(run_id=run_id, status="waiting")
        assert gate.tool == "notify_team" and Notification.objects.count() == 0
        transitions.gate_approve(gate=gate, by=people.bob, reason="ok", clock=clock)
        done = execute(run_id, worker="worker-2")
    finally:
        registry.unregister_agent("pai-native-gate")
    assert done.status == "succeeded", done
    assert done.result == "Refunded 1 invoices and told #billing."
    assert Notification.objects.count() == 1 and ProviderCharge.objects.count() == 1
    assert Step.objects.get(run_id=run_id, step_id=note).kind == "effect"
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}  # the stop asked the model nothing again


# --- an MCP server's tools (a loopback FastMCP server, in process) -------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_mcp_servers_tools_are_steps_and_its_effect_gets_its_key(
    kind: str, execute: Any
) -> None:
    pytest.importorskip("fastmcp")
    from fastmcp import FastMCP
    from fastmcp.server.dependencies import get_context
    from pydantic_ai.mcp import MCPToolset

    from ledger.adapters.pydantic_ai import send_effect_key
    from ledger.agents import NOT_HAPPENED

    server = FastMCP("billing")
    notes: dict[str, str] = {}  # the server's downstream, by idempotency key
    calls: list[str] = []

    @server.tool
    def invoice_total(invoice_id: str) -> int:
        calls.append("invoice_total")
        return 4200

    @server.tool
    def post_note(text: str) -> dict[str, str]:
        calls.append("post_note")
        key = get_context().request_context.meta["idempotency_key"]  # type: ignore[union-attr,index]
        notes.setdefault(key, text)
        return {"note": key}

    def find_note(idempotency_key: str) -> Any:
        return {"note": idempotency_key} if idempotency_key in notes else NOT_HAPPENED

    desk = PydanticAgent(
        TestModel(), toolsets=[MCPToolset(server, process_tool_call=send_effect_key)]
    )
    options = {"effects": {"post_note": find_note}}

    def body(ctx: Any, inputs: Any) -> Any:
        return run_agent(ctx, desk, "note it", **options)

    async def abody(ctx: Any, inputs: Any) -> Any:
        return await run_agent(ctx, desk, "note it", **options)

    agent("pai-mcp")(body if kind == "sync" else abody)
    try:
        run_id = transitions.run_start(agent="pai-mcp", inputs={}).run_id
        first = execute(run_id)
        assert first.status == "succeeded", first
        Run.objects.filter(pk=run_id).update(status="failed")
        transitions.run_resume(
            run_id=run_id, by="test", reason="replay", seen_version=None, anyway=True
        )
        again = execute(run_id, worker="worker-2")
    finally:
        registry.unregister_agent("pai-mcp")
    rows = {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}
    assert {k: r.kind for k, r in rows.items()} == {
        "agent.turn.1": "model",
        "agent.turn.1.tools.0.invoice_total": "read",
        "agent.turn.1.tools.1.post_note": "effect",
        "agent.turn.2": "model",
    }
    key = rows["agent.turn.1.tools.1.post_note"].effect_key
    assert notes == {key: "a"}  # the server received the effect's key in the request's _meta
    assert sorted(calls) == ["invoice_total", "post_note"]  # the replay called nothing again
    assert again.status == "succeeded" and again.result == first.result


# --- agent.iter, durable: iter_agent ------------------------------------------------------------


def test_iter_agent_walks_the_same_nodes_on_a_resume_asking_and_running_nothing_again(
    execute: Any, asked_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger.adapters.pydantic_ai import iter_agent

    walked: list[list[str]] = []

    async def body(ctx: Any, inputs: Any) -> Any:
        billing = pydantic_agents.Billing(invoices=pydantic_agents.INVOICES_BY_ID)
        nodes: list[str] = []
        async with iter_agent(
            ctx,
            pydantic_agents.native_desk,
            "Please refund invoices inv_1001, inv_1003.",
            deps=billing,
            toolsets=[pydantic_agents.team],
            effects=pydantic_agents.NATIVE_EFFECTS,
        ) as running:
            async for node in running:
                nodes.append(type(node).__name__)
        walked.append(nodes)
        assert running.result is not None
        return {"text": running.result.output}

    agent("pai-iter")(body)
    try:
        run_id = transitions.run_start(agent="pai-iter", inputs={}).run_id
        first = execute(run_id)
        assert first.status == "succeeded", first
        ran: list[str] = []
        monkeypatch.setattr(pydantic_agents.Billing, "refund", lambda *args: ran.append("refund"))
        Run.objects.filter(pk=run_id).update(status="failed")
        transitions.run_resume(
            run_id=run_id, by="test", reason="replay", seen_version=None, anyway=True
        )
        again = execute(run_id, worker="worker-2")
    finally:
        registry.unregister_agent("pai-iter")
    assert first.result == again.result == ANSWER
    rows = dict(Step.objects.filter(run_id=run_id).values_list("step_id", "kind"))
    assert rows == EXPECTED_STEPS
    assert again.replayed == len(EXPECTED_STEPS) and again.executed == 0
    assert walked[0] == walked[1] and "CallToolsNode" in walked[0]
    assert ran == [] and asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert ProviderCharge.objects.count() == 2 and Notification.objects.count() == 1


def test_iter_agent_in_a_sync_ledger_agent_is_refused(execute: Any) -> None:
    from ledger.adapters.pydantic_ai import iter_agent

    def body(ctx: Any, inputs: Any) -> Any:
        return iter_agent(ctx, pydantic_agents.native_desk, "hi")

    outcome, rows = run_body(execute, body)
    assert outcome.status == "failed" and "make the ledger agent an async def" in outcome.detail
    assert rows == {}


def test_the_dry_replay_of_a_finished_run_replays_every_step_and_runs_nothing(
    execute: Any, asked_log: Path
) -> None:
    from ledger.processes.preview import preview_resume

    run_id = start("refund_pydantic_ai_native")
    assert execute(run_id).status == "succeeded"
    preview = preview_resume(run_id=run_id, seconds=30)
    actions = {s.step_id: s.action for s in preview.steps}
    assert actions == dict.fromkeys(EXPECTED_STEPS, "replay"), (preview.error, actions)
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}
    assert ProviderCharge.objects.count() == 2 and Notification.objects.count() == 1


def test_the_dry_replay_of_an_async_agent_stops_saying_it_cannot_walk_the_framework(
    execute: Any, asked_log: Path
) -> None:
    """The dry replay walks an async agent with no event loop; PydanticAI needs one, so the
    walk stops at once and says why (never an error, never a run)."""
    from ledger.processes.preview import preview_resume

    run_id = start("refund_pydantic_ai_native_async")
    assert execute(run_id).status == "succeeded"
    preview = preview_resume(run_id=run_id, seconds=30)
    assert preview.error == "" and "awaits something other than its run context" in (
        preview.stopped
    )
    assert preview.blocks_again() == ""  # it does not hold a resume back
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}


def test_a_tool_that_defers_its_own_call_is_refused_saying_what_to_declare(execute: Any) -> None:
    from pydantic_ai import ApprovalRequired

    helper = PydanticAgent(TestModel(), name="deferring")

    @helper.tool_plain
    def wire(amount: int) -> int:
        raise ApprovalRequired()

    outcome, rows = run_body(execute, lambda ctx, inputs: run_agent(ctx, helper, "wire"))
    assert outcome.status == "failed", outcome
    assert "tool 'wire' raised ApprovalRequired" in outcome.detail, outcome.detail
    assert "requires_approval=['wire']" in outcome.detail
    assert rows["agent.turn.1.tools.0.wire"].status == "failed"
