"""LangGraph graphs on the ledger (``ledger.adapters.langgraph``), offline: the example refund
desk (``ledger.examples.langgraph_agents``) — a graph as LangGraph's docs build one: a chat model
with tools bound, a ``ToolNode`` with an async tool, parallel tool calls in one answer, and a
review node whose ``interrupt()`` stops the run for a person.

Every test asserts the ledger after the act, the simulators' tables (how often each effect
happened, one row per key) and how often the scripted model was really asked (a log file the
model appends each turn to, in any process).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from django.db import connection

from harness.cluster import Cluster, wait_for
from ledger import registry, transitions
from ledger.errors import AgentDefinitionError
from ledger.examples import langgraph_agents
from ledger.examples.models import Notification, ProviderCharge
from ledger.models import GraphCheckpoint, Run, Step
from runs.operations.tasks import resume_run, start_run
from tests.support.dashboard_runs import restore_roles, signed_in

pytestmark = pytest.mark.django_db(transaction=True)

assert connection  # the skipif conditions read it
MODULES = "ledger.examples.agents,ledger.examples.langgraph_agents"
INVOICES = ["inv_1001", "inv_1003"]
EXPECTED_STEPS = {  # <superstep>.<node>: agent 1, review 2, tools 3, agent 4, review 5, ...
    "graph.1.agent.model.1": "model",
    "graph.3.tools.tools.0.fetch_invoice": "read",
    "graph.3.tools.tools.1.fetch_invoice": "read",
    "graph.4.agent.model.1": "model",
    "graph.interrupt.1": "clock",
    "graph.6.tools.tools.0.refund_charge": "effect",
    "graph.6.tools.tools.1.refund_charge": "effect",
    "graph.7.agent.model.1": "model",
    "graph.9.tools.tools.0.notify_team": "effect",
    "graph.10.agent.model.1": "model",
}
ANSWER = {"text": "Refunded 2 invoices and told #billing."}
APPROVE = {"approve": True}


@pytest.fixture
def asked_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "asked.log"
    monkeypatch.setenv("RUNLEDGER_EXAMPLE_ASKED", str(log))
    return log


def asks(log: Path) -> dict[int, int]:
    if not log.exists():
        return {}
    return dict(Counter(int(line) for line in log.read_text().split()))


def start() -> str:
    return transitions.run_start(agent="refund_langgraph", inputs={"invoice_ids": INVOICES}).run_id


def rows(run_id: str) -> dict[str, Step]:
    return {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}


def answer(run_id: str, clock: Any, decision: Any = APPROVE) -> None:
    transitions.question_answer(run_id=run_id, answer=decision, by="alice", clock=clock)
    clock.advance(1)


def effects_once() -> None:
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert sorted(ProviderCharge.objects.values_list("amount_cents", flat=True)) == [-4200, -990]
    assert Notification.objects.count() == 1


def test_a_graph_runs_each_model_call_and_tool_call_as_a_step_and_stops_for_a_person(
    execute: Any, asked_log: Path, clock: Any, settings: Any
) -> None:
    run_id = start()
    first = execute(run_id)
    run = Run.objects.get(pk=run_id)
    assert (first.status, run.reason, run.blocked_step_id) == (
        "needs_attention",
        "question",
        "graph.interrupt.1",
    ), run.detail
    assert Step.objects.get(run_id=run_id, step_id="graph.interrupt.1").inputs["question"] == (
        "Send 2 refunds?"
    )
    assert not ProviderCharge.objects.exists()  # nothing sent before the person said so
    answer(run_id, clock)
    outcome = execute(run_id, worker="worker-2")
    assert outcome.status == "succeeded", outcome
    assert outcome.result == ANSWER
    ledger = rows(run_id)
    assert {k: r.kind for k, r in ledger.items()} == EXPECTED_STEPS
    refund = ledger["graph.6.tools.tools.0.refund_charge"]
    assert refund.effect_key == f"{run_id}:graph.6.tools.tools.0.refund_charge"
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}  # the second execution replayed 1 and 2
    effects_once()
    # The graph's checkpoints live beside the run, the last execution's.
    checkpoints = GraphCheckpoint.objects.filter(run_id=run_id)
    assert checkpoints.count() >= 9
    assert {c.thread_id for c in checkpoints} == {f"{run_id}/graph"}
    # The run page lists them.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    page = signed_in("viewer", "vera").get(f"/runs/{run_id}/").content.decode()
    block = page[page.index('id="run-checkpoints"') :]
    block = block[: block.index("</section>")].replace("<wbr>", "")
    newest = checkpoints.order_by("-checkpoint_id").first()
    assert newest is not None and newest.checkpoint_id in block
    assert f"{run_id}/graph" in block and "loop" in block  # LangGraph's source of a step


def test_a_finished_graph_replays_without_asking_or_sending_again(
    execute: Any, asked_log: Path, clock: Any
) -> None:
    run_id = start()
    execute(run_id)
    answer(run_id, clock)
    first = execute(run_id)
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(
        run_id=run_id, by="test", reason="replay", seen_version=None, anyway=True
    )
    again = execute(run_id, worker="worker-3")
    assert again.status == "succeeded" and again.result == first.result == ANSWER
    assert again.executed == 0 and again.replayed == len(EXPECTED_STEPS)
    assert asks(asked_log) == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


def test_a_declined_refund_is_the_graphs_own_path(execute: Any, clock: Any) -> None:
    run_id = start()
    execute(run_id)
    answer(run_id, clock, {"approve": False})
    outcome = execute(run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result == {"text": "No refund was sent: a person declined."}
    assert not ProviderCharge.objects.exists()
    assert "graph.6.tools.tools.0.refund_charge" not in rows(run_id)


# --- a real Celery worker SIGKILLed ----------------------------------------------------------


def settled(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status not in ("queued", "running")


def asking(run_id: str) -> bool:
    run = Run.objects.get(pk=run_id)
    return run.status == "needs_attention" and run.reason == "question"


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    "kill_at",
    [
        "charge.after_effect",  # (a) a refund sent, its result not committed
        "lg.model@2",  # (b) inside the second model request
        "langgraph.before_request@3",  # (c) between nodes: the refunds committed, turn 3 not asked
        "notify.after_effect",  # (d) inside the effect without a lookup
    ],
)
def test_a_celery_worker_killed_mid_graph_resumes_asking_once_and_sending_once(
    kill_at: str, tmp_path: Path, asked_log: Path
) -> None:
    """The whole `celery -A runs worker` dies at the point; a second worker and beat's sweep
    recover the run: each model request asked once, each effect sent once, the same output —
    or, killed inside the effect without a lookup, the run stops for a person."""
    env = {"RUNLEDGER_AGENT_MODULES": MODULES, "RUNLEDGER_EXAMPLE_ASKED": str(asked_log)}
    with Cluster(tmp_path / "cluster", lease_seconds=2, sweep_seconds=0.5, env=env) as cluster:
        run_id = start()
        victim = cluster.worker(
            "victim", env={"RUNLEDGER_KILL_AT": kill_at, "RUNLEDGER_KILL_SCOPE": "group"}
        )
        cluster.send(start_run, run_id)
        # The person approves the refunds when the graph asks (unless the victim died first).
        assert wait_for(lambda: victim.poll() is not None or asking(run_id), timeout=90), (
            cluster.log("victim")
        )
        if victim.poll() is None:
            transitions.question_answer(run_id=run_id, answer=APPROVE, by="alice")
            cluster.send(resume_run, run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=90), cluster.log("victim")
        assert Run.objects.get(pk=run_id).status == "running"
        before = rows(run_id)
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: settled(run_id), timeout=120), cluster.log("rescuer")
        if asking(run_id):  # killed before the question: the rescuer asks it
            transitions.question_answer(run_id=run_id, answer=APPROVE, by="alice")
            cluster.send(resume_run, run_id)
            assert wait_for(lambda: settled(run_id), timeout=120), cluster.log("rescuer")
        rescued = cluster.log("rescuer", tail=60)
    run = Run.objects.get(pk=run_id)
    after = rows(run_id)
    for step_id, row in before.items():  # what had finished replayed untouched
        if row.status == "succeeded":
            assert (after[step_id].attempt, after[step_id].result) == (row.attempt, row.result)
    if kill_at == "notify.after_effect":
        assert run.status == "needs_attention", run.detail
        assert run.blocked_step_id == "graph.9.tools.tools.0.notify_team", run.detail
        assert after["graph.9.tools.tools.0.notify_team"].status == "started"
        assert Notification.objects.count() == 1  # sent once, and not again
        assert asks(asked_log) == {1: 1, 2: 1, 3: 1}
        connection.close()
        return
    assert run.status == "succeeded", "\n".join([run.detail, rescued])
    assert run.result == ANSWER
    assert {k: r.kind for k, r in after.items()} == EXPECTED_STEPS
    # A model request killed in flight was never answered, so it is asked on the resume: once
    # answered, no request is asked again.
    assert asks(asked_log) == {1: 1, 2: 2 if kill_at == "lg.model@2" else 1, 3: 1, 4: 1}
    effects_once()
    connection.close()


# --- refused ----------------------------------------------------------------------------------


def refused_run(execute: Any, body: Any) -> Any:
    from ledger.agents import agent

    agent("lg-bad")(body)
    try:
        run_id = transitions.run_start(agent="lg-bad", inputs={}).run_id
        outcome = execute(run_id)
        assert outcome.status == "failed", outcome
        assert not Step.objects.filter(run_id=run_id).exists()  # nothing half-written
        return outcome
    finally:
        registry.unregister_agent("lg-bad")


def test_a_graph_invoked_directly_inside_a_run_is_refused_before_anything_runs(
    execute: Any, asked_log: Path
) -> None:
    async def body(ctx: Any, inputs: Any) -> Any:
        return await langgraph_agents.graph.ainvoke({"messages": [("user", "hi inv_1001")]})

    outcome = refused_run(execute, body)
    assert "graph.ainvoke directly inside runledger run" in outcome.detail, outcome.detail
    assert asks(asked_log) == {}


def test_a_chat_model_called_outside_run_graph_inside_a_run_is_refused(
    execute: Any, asked_log: Path
) -> None:
    async def body(ctx: Any, inputs: Any) -> Any:
        return (await langgraph_agents.model.ainvoke("refund inv_1001")).content

    outcome = refused_run(execute, body)
    assert "a chat model directly inside runledger run" in outcome.detail, outcome.detail
    assert asks(asked_log) == {}


def test_run_graph_in_a_sync_agent_is_refused(execute: Any) -> None:
    from ledger.adapters.langgraph import run_graph

    def body(ctx: Any, inputs: Any) -> Any:
        return run_graph(ctx, langgraph_agents.graph, {"messages": []})

    outcome = refused_run(execute, body)
    assert "make the ledger agent an async def" in outcome.detail, outcome.detail


def test_an_effect_the_graph_does_not_offer_is_refused_naming_the_tools(execute: Any) -> None:
    from ledger.adapters.langgraph import run_graph

    async def body(ctx: Any, inputs: Any) -> Any:
        return await run_graph(
            ctx, langgraph_agents.graph, {"messages": []}, effects={"refund": None}
        )

    outcome = refused_run(execute, body)
    assert "names 'refund', which no ToolNode of the graph offers" in outcome.detail
    assert "fetch_invoice, notify_team, refund_charge" in outcome.detail


def test_a_streamed_model_call_inside_a_node_is_refused(execute: Any) -> None:
    from langgraph.graph import START, MessagesState, StateGraph

    from ledger.adapters.langgraph import run_graph

    async def streams(state: MessagesState) -> dict[str, Any]:
        chunks = [c async for c in langgraph_agents.model.astream(state["messages"])]
        return {"messages": chunks[-1:]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", streams)
    builder.add_edge(START, "agent")
    streaming = builder.compile()

    async def body(ctx: Any, inputs: Any) -> Any:
        return await run_graph(ctx, streaming, {"messages": [("user", "hi")]})

    outcome = refused_run(execute, body)
    assert "streaming a chat model inside a node is not durable" in outcome.detail


def test_a_langgraph_outside_the_pinned_range_is_refused() -> None:
    from ledger.adapters.langgraph import check_version

    check_version("1.2.24")
    for version in ("0.6.11", "2.0.0", "dev"):
        with pytest.raises(AgentDefinitionError, match=r">=1,<2.*runledger\[langgraph\]"):
            check_version(version)


def test_a_sync_node_calling_model_invoke_is_a_model_step_replayed_on_resume(
    execute: Any, asked_log: Path
) -> None:
    """A plain ``def`` node (LangGraph runs it on a thread) calling ``model.invoke``: the call
    crosses to the run's loop and is the same model step; a replay asks nothing."""
    from langgraph.graph import START, MessagesState, StateGraph

    from ledger.adapters.langgraph import run_graph
    from ledger.agents import agent

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [langgraph_agents.model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", call_model)
    builder.add_edge(START, "agent")
    graph = builder.compile()

    @agent("lg-sync-node")
    async def body(ctx: Any, inputs: Any) -> Any:
        state = await run_graph(ctx, graph, {"messages": [("user", "refund inv_1001")]})
        return state["messages"][-1]["data"]["tool_calls"][0]["args"]

    try:
        run_id = transitions.run_start(agent="lg-sync-node", inputs={}).run_id
        first = execute(run_id)
        Run.objects.filter(pk=run_id).update(status="failed")
        transitions.run_resume(
            run_id=run_id, by="test", reason="replay", seen_version=None, anyway=True
        )
        again = execute(run_id, worker="worker-2")
    finally:
        registry.unregister_agent("lg-sync-node")
    assert first.status == again.status == "succeeded", (first, again)
    assert first.result == again.result == {"invoice_id": "inv_1001"}
    assert dict(Step.objects.filter(run_id=run_id).values_list("step_id", "kind")) == {
        "graph.1.agent.model.1": "model"
    }
    assert again.replayed == 1 and again.executed == 0
    assert asks(asked_log) == {1: 1}
