"""The tool calls of one model answer as one fan-out, for both framework adapters
(``ledger.adapters.pydantic_ai``, ``ledger.adapters.openai_agents``), on the agents of
``harness.fanout_agents``: one answer calls a read, an effect with a lookup and an effect
without one. Every test asserts the ledger, the model's asks and the simulators' tables after
the act; the kill tests SIGKILL a real Celery worker."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from django.db import connection

from harness import fanout_agents as example
from harness import faults
from harness.cluster import Cluster, wait_for
from ledger import transitions
from ledger.engine.live import SETTLED_BY_LOOKUP
from ledger.examples.models import Notification, ProviderCharge
from ledger.models import Run, Step
from runs.operations.tasks import start_run
from tests.support.chains import chain, rows

pytestmark = pytest.mark.django_db(transaction=True)
assert connection  # the skipif conditions read it

MODULES = "ledger.examples.agents,harness.fanout_agents"
FRAMEWORKS = {  # agent name -> the prefix of its step ids
    "fanout_pydantic_ai": "agent.turn",
    "fanout_openai_agents": "openai.turn",
}


def expected_steps(agent: str) -> list[str]:
    turn = FRAMEWORKS[agent]
    return [
        f"{turn}.1",
        f"{turn}.1.tools.0.fetch_invoice",
        f"{turn}.1.tools.1.refund_charge",
        f"{turn}.1.tools.2.notify_team",
        f"{turn}.2",
    ]


@pytest.fixture
def asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "asks"
    monkeypatch.setenv("RUNLEDGER_FANOUT_ASKS", str(path))
    return path


def asked(path: Path) -> dict[int, int]:
    return dict(Counter(int(x) for x in path.read_text().split())) if path.exists() else {}


def once_each() -> None:
    """The refund happened once (one row under one key), the note once."""
    assert ProviderCharge.objects.count() == 1
    assert ProviderCharge.objects.get().amount_cents == -4200
    assert Notification.objects.count() == 1


@pytest.fixture
def together() -> Iterator[None]:
    """The read and the note meet at a barrier inside their tools: they pass only if they run
    at the same time (a serial run breaks the barrier, failing the read's step)."""
    barrier = threading.Barrier(2, timeout=30)
    faults.set_hook("fetch_invoice", barrier.wait)
    faults.set_hook("notify.before_effect", barrier.wait)
    yield
    faults.clear_hooks()


@pytest.mark.skipif("connection.vendor != 'postgresql'")  # siblings on threads need it
@pytest.mark.parametrize("name", list(FRAMEWORKS))
def test_the_calls_of_one_answer_run_at_once_as_one_fanout_in_the_models_order(
    name: str, execute: Any, asks: Path, together: None
) -> None:
    run_id = transitions.run_start(agent=name, inputs={}).run_id
    outcome = execute(run_id)
    assert (outcome.status, outcome.result) == ("succeeded", {"text": example.FINAL}), outcome
    ledger = rows(run_id)
    assert chain(ledger) == expected_steps(name)  # chained in the model's order
    refund = ledger[expected_steps(name)[2]]
    assert (refund.kind, refund.effect_key) == ("effect", f"{run_id}:{refund.step_id}")
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}
    assert ledger[expected_steps(name)[1]].kind == "read"
    assert all(r.status == "succeeded" and r.attempt == 1 for r in ledger.values())
    assert asked(asks) == {1: 1, 2: 1}
    once_each()


def settled(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status not in ("queued", "running")


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize("name", list(FRAMEWORKS))
@pytest.mark.parametrize(
    "kill_at",
    [
        "charge.after_effect",  # the refund sent, its result not committed: the lookup settles
        "notify.after_effect",  # the note sent, its result not committed: nobody can know
    ],
)
def test_a_worker_killed_inside_one_call_of_the_fanout_resumes_only_the_unfinished_calls(
    name: str, kill_at: str, tmp_path: Path, asks: Path, execute: Any, people: Any, clock: Any
) -> None:
    """The whole `celery -A runs worker` dies between one call's intent and its result; a
    second worker and beat's sweep resume the run: the finished siblings replay, the refund is
    looked up (never sent twice), the note without a lookup stops the run for a person, whose
    "it happened" lets the run finish with what an uninterrupted run answers."""
    env = {"RUNLEDGER_AGENT_MODULES": MODULES, "RUNLEDGER_FANOUT_ASKS": str(asks)}
    victim_env = {"RUNLEDGER_KILL_AT": kill_at, "RUNLEDGER_KILL_SCOPE": "group"}
    if kill_at == "charge.after_effect":
        victim_env["RUNLEDGER_FANOUT_NOTIFY_FIRST"] = "1"  # the note commits before the kill
    steps = expected_steps(name)
    with Cluster(tmp_path / "cluster", lease_seconds=2, sweep_seconds=0.5, env=env) as cluster:
        run_id = transitions.run_start(agent=name, inputs={}).run_id
        victim = cluster.worker("victim", env=victim_env)
        cluster.send(start_run, run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=90), cluster.log("victim")
        assert victim.returncode == -9, cluster.log("victim")
        before = rows(run_id)
        killed = steps[2] if kill_at == "charge.after_effect" else steps[3]
        assert before[killed].status == "started", before  # the intent, no result
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: settled(run_id), timeout=120), cluster.log("rescuer")
    run = Run.objects.get(pk=run_id)
    after = rows(run_id)
    for step_id, row in before.items():  # what had finished replayed untouched
        if row.status == "succeeded":
            assert (after[step_id].attempt, after[step_id].result) == (row.attempt, row.result)
        assert after[step_id].effect_key == row.effect_key, step_id
    if kill_at == "notify.after_effect":
        assert (run.status, run.reason, run.blocked_step_id) == (
            "needs_attention",
            "reconciliation",
            steps[3],
        ), run.detail
        assert after[steps[3]].status == "started"
        assert Notification.objects.count() == 1  # sent once, not again blindly
        assert asked(asks) == {1: 1}
        note = Step.objects.get(run_id=run_id, step_id=steps[3])
        proposal = transitions.settlement_propose(
            step=note,
            outcome="happened",
            result={"notification": Notification.objects.get().pk, "channel": "#billing"},
            reason="the message is in #billing",
            by=people.alice,
            seen_version=note.version,
        )
        transitions.settlement_approve(settlement=proposal, by=people.bob, reason="checked")
        outcome = execute(run_id, worker="worker-3")
        assert outcome.status == "succeeded", outcome
        run.refresh_from_db()
    else:
        assert (run.status, run.executions, run.resume_count) == ("succeeded", 2, 1), run.detail
        refund = after[steps[2]]
        assert (refund.status, refund.attempt, refund.settled_by) == (
            "succeeded",
            1,
            SETTLED_BY_LOOKUP,
        )
    assert run.result == {"text": example.FINAL}  # what an uninterrupted run answers
    assert chain(rows(run_id)) == steps
    assert asked(asks) == {1: 1, 2: 1}  # each model request asked once
    once_each()
    connection.close()


# --- PydanticAI: calls that require approval ---------------------------------------------------


@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    ("declared", "decision"),
    [("names", "approve"), ("names", "reject"), ("function", "approve")],
)
def test_a_pydantic_ai_call_that_requires_approval_waits_at_the_gate_with_its_arguments(
    declared: str, decision: str, execute: Any, asks: Path, people: Any, clock: Any
) -> None:
    """``requires_approval=`` (PydanticAI's name) puts the note behind runledger's gate: the run
    stops needs_attention before its intent row, the gate holds the call's exact arguments; the
    answer's other calls ran as their fan-out. Approved, the note is sent once; rejected, the
    model is told through PydanticAI's denial (``ToolDenied``) and the run goes on."""
    from ledger import registry
    from ledger.adapters.pydantic_ai import run_agent
    from ledger.agents import agent
    from ledger.models import Gate

    needs: Any = (
        ["notify_team"] if declared == "names" else (lambda name, args: name == "notify_team")
    )

    @agent("pai-approval", tools=example.TOOLS)
    def body(ctx: Any, inputs: Any) -> Any:
        text = run_agent(
            ctx,
            example.pydantic_agent(),
            example.PROMPT,
            tools=example.TOOLS,
            requires_approval=needs,
        )
        return {"text": text}

    note = "agent.turn.1.tools.2.notify_team"
    try:
        run_id = transitions.run_start(agent="pai-approval", inputs={}).run_id
        outcome = execute(run_id)
        assert (outcome.status, outcome.reason, outcome.step_id) == (
            "needs_attention",
            "approval",
            note,
        ), outcome
        ledger = rows(run_id)
        assert note not in ledger  # no intent row before the approval
        assert ledger["agent.turn.1.tools.1.refund_charge"].status == "succeeded"
        gate = Gate.objects.get(run_id=run_id, status="waiting")
        assert (gate.tool, gate.arguments_text) == (
            "notify_team",
            '{"channel":"#billing","text":"refunding inv_1001"}',
        )
        assert Notification.objects.count() == 0 and ProviderCharge.objects.count() == 1
        if decision == "approve":
            transitions.gate_approve(gate=gate, by=people.bob, reason="ok", clock=clock)
        else:
            transitions.gate_reject(gate=gate, by=people.bob, reason="not today", clock=clock)
        done = execute(run_id, worker="worker-2")
        assert done.status == "succeeded", done
        # A replay walks the same path, the rejection included, asking nobody again.
        Run.objects.filter(pk=run_id).update(status="failed")
        transitions.run_resume(run_id=run_id, by="test", reason="replay", seen_version=None)
        again = execute(run_id, worker="worker-3")
    finally:
        registry.unregister_agent("pai-approval")
    assert again.status == "succeeded" and again.result == done.result
    assert asked(asks) == {1: 1, 2: 1}
    if decision == "approve":
        assert done.result == {"text": example.FINAL}
        assert Gate.objects.get(pk=gate.pk).status == "used"
        once_each()
        return
    assert "did not: The tool call was denied" in done.result["text"], done.result
    assert "not today" in done.result["text"]
    assert Notification.objects.count() == 0 and ProviderCharge.objects.count() == 1
    assert rows(run_id)[note].status == "failed"  # the rejection, on the path
    request = rows(run_id)["agent.turn.2"].inputs["messages"][-1]
    denied = [p for p in request["parts"] if p.get("tool_name") == "notify_team"]
    assert [p["outcome"] for p in denied] == ["denied"], request
