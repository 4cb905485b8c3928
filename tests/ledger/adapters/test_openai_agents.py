"""The OpenAI Agents SDK adapter (``ledger.adapters.openai_agents``) with a fake SDK ``Model``
(``harness.openai_agents_agent``), on the real ledger: every test asserts the ledger, the fake
model's asks and the simulators' tables after the act."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

pytest.importorskip("agents")

from harness import openai_agents_agent as example
from harness.cluster import Cluster, wait_for
from ledger import transitions
from ledger.adapters import openai_agents
from ledger.examples.models import Notification, ProviderCharge
from ledger.models import Run, Step
from runs.operations.tasks import start_run
from tests.support.chains import chain, rows

pytestmark = pytest.mark.django_db(transaction=True)
assert connection  # the skipif conditions below read it

EXPECTED_STEPS = {
    "openai.guardrail.input.refunds.on_topic": "read",
    "openai.turn.1": "model",
    "openai.turn.1.tools.0.fetch_invoice": "read",
    "openai.turn.1.tools.1.fetch_invoice": "read",
    "openai.turn.2": "model",
    "openai.turn.2.tools.0.refund_charge": "effect",
    "openai.turn.2.tools.1.refund_charge": "effect",
    "openai.turn.3": "model",
    "openai.turn.3.tools.0.notify_team": "effect",
    "openai.turn.4": "model",
}


def effects_once() -> None:
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert sorted(ProviderCharge.objects.values_list("amount_cents", flat=True)) == [-4200, -990]
    assert Notification.objects.count() == 1


def asked(path: Path, what: str = "") -> dict[int, int]:
    """How often the fake model answered each turn (``what="sent "``: received it)."""
    lines = path.read_text().splitlines() if path.exists() else []
    prefix = what or ""
    return dict(
        Counter(
            int(x.removeprefix(prefix))
            for x in lines
            if x.startswith(prefix) and x.removeprefix(prefix).isdigit()
        )
    )


@pytest.fixture
def asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "asks"
    monkeypatch.setenv("RUNLEDGER_OA_ASKS", str(path))
    return path


def start() -> str:
    return transitions.run_start(agent="oa_refunds", inputs={}).run_id


def test_a_multi_turn_agent_with_parallel_tool_calls_is_a_chain_of_steps(
    asks: Path, execute: Any
) -> None:
    run_id = start()
    outcome = execute(run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result == {"text": example.FINAL}
    ledger = rows(run_id)
    assert {k: r.kind for k, r in ledger.items()} == EXPECTED_STEPS
    assert chain(ledger) == list(EXPECTED_STEPS)  # tool calls in the answer's order
    assert all(r.status == "succeeded" and r.attempt == 1 for r in ledger.values())
    refund = ledger["openai.turn.2.tools.0.refund_charge"]
    assert refund.effect_key == f"{run_id}:openai.turn.2.tools.0.refund_charge"
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}
    assert ProviderCharge.objects.filter(idempotency_key=refund.effect_key).count() == 1
    turn_1 = ledger["openai.turn.1"]
    assert turn_1.inputs["system"] == example.SYSTEM["2"]
    assert {t["name"] for t in turn_1.inputs["tools"]} == {
        "fetch_invoice",
        "refund_charge",
        "notify_team",
    }
    assert ledger["openai.guardrail.input.refunds.on_topic"].result == {
        "tripwire": False,
        "info": {"refund": True},
    }
    assert asked(asks) == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


def test_a_finished_run_replays_without_asking_the_model_or_sending_again(
    asks: Path, execute: Any
) -> None:
    run_id = start()
    first = execute(run_id)
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(run_id=run_id, by="test", reason="replay", seen_version=None)
    again = execute(run_id, worker="worker-2")
    assert again.status == "succeeded" and again.result == first.result
    assert asked(asks) == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


def test_the_transcript_says_what_was_said_beside_the_steps(asks: Path, execute: Any) -> None:
    run_id = start()
    execute(run_id)
    said = openai_agents.transcript(run_id)
    assert [(s["role"], s["step_id"]) for s in said] == [
        ("user", "openai.turn.1"),
        ("tool_call", "openai.turn.1"),
        ("tool_call", "openai.turn.1"),
        ("tool_call", "openai.turn.2"),
        ("tool_call", "openai.turn.2"),
        ("tool_call", "openai.turn.3"),
        ("assistant", "openai.turn.4"),
    ]
    assert said[0]["text"] == "Please refund invoices inv_1001 and inv_1003."
    assert said[-1]["text"] == example.FINAL and said[-1]["time"]
    assert said[3]["text"] == 'refund_charge({"customer": "cus_ada", "amount_cents": 4200})'


def test_changed_instructions_between_crash_and_resume_are_a_stale_model_step(
    asks: Path, execute: Any, crash_at: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = start()
    crash_at("charge.before_effect")
    execute(run_id, crash_expected=True)
    monkeypatch.setenv("RUNLEDGER_EXAMPLE_PROMPT", "1")  # a deploy changed the system prompt
    outcome = execute(run_id, worker="worker-2")
    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "stale",
        "openai.turn.1",
    )
    assert "differs" in outcome.detail, outcome.detail
    assert asked(asks) == {1: 1, 2: 1}  # nothing asked again
    # The crashed refund (the first sibling to reach the point) was never sent; the other, in
    # the same fan-out, may have been, once: nothing was sent under the new prompt.
    refunds = {k: r for k, r in rows(run_id).items() if k.startswith("openai.turn.2.tools.")}
    sent = set(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert len(sent) <= 1 and sent <= {r.effect_key for r in refunds.values()}, sent
    assert sorted(r.status for r in refunds.values() if r.effect_key not in sent) in (
        ["started"],
        ["started", "started"],
    )
    # The diff a person sees (the stale page's dry replay of the SDK run): only the prompt.
    from ledger.processes.preview import stale_entry

    stale = rows(run_id)["openai.turn.1"]
    today = stale_entry(stale)
    changed = {k for k in stale.inputs if stale.inputs[k] != today.current_inputs.get(k)}
    assert changed == {"system"}
    assert today.current_inputs["system"] == example.SYSTEM["1"]
    assert asked(asks) == {1: 1, 2: 1}  # the dry replay asked nobody


def test_a_tool_that_returns_something_not_json_fails_its_step_saying_which_tool(
    execute: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(example.INVOICES, "inv_1001", {"customer": "cus_ada", "when": object()})
    run_id = start()
    outcome = execute(run_id)
    assert outcome.status in ("failed", "needs_attention"), outcome
    assert "fetch_invoice" in outcome.detail and "not JSON" in outcome.detail, outcome.detail
    assert ProviderCharge.objects.count() == 0
    assert "openai.turn.2" not in rows(run_id)


def test_bad_declarations_are_refused_before_anything_is_written() -> None:
    from agents import Agent as SDKAgent
    from agents import function_tool as sdk_function_tool

    from ledger.errors import AgentDefinitionError
    from ledger.examples.agents import fetch_invoice as ledger_read

    with pytest.raises(AgentDefinitionError, match="only effects have"):
        openai_agents.function_tool(ledger_read, needs_approval=True)
    with pytest.raises(AgentDefinitionError, match="takes a runledger @tool"):
        openai_agents.function_tool(lambda: None)  # type: ignore[arg-type]

    @sdk_function_tool(needs_approval=True)
    def wire_money(amount: int) -> str:
        return "sent"

    gated = SDKAgent(name="a", model="scripted", tools=[wire_money])
    with pytest.raises(AgentDefinitionError, match="'wire_money' has needs_approval"):
        openai_agents.run(None, gated, "hi")  # type: ignore[arg-type]
    held = SDKAgent(name="b", model=example.ScriptedModel())
    with pytest.raises(AgentDefinitionError, match="holds a Model object"):
        openai_agents.run(None, held, "hi")  # type: ignore[arg-type]
    with pytest.raises(ImportError, match=r">=0\.24,<0\.25"):
        openai_agents._check_version("0.3.1")
    assert Step.objects.count() == 0 and Run.objects.count() == 0


def settled(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status not in ("queued", "running")


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    "kill_at",
    [
        "charge.after_effect",  # (a) a refund sent, its result not committed: the lookup settles it
        "oa.model@2",  # (b) inside turn 2's model request
        "openai_agents.before_model@3",  # (c) turn 2's tools committed, turn 3 not asked
        "notify.before_effect",  # (a) the effect without a lookup: nobody can know
    ],
)
def test_a_celery_worker_killed_mid_run_resumes_asking_each_turn_once_and_sending_each_effect_once(
    kill_at: str, tmp_path: Path
) -> None:
    """The whole `celery -A runs worker` (parent and pool child) is SIGKILLed at the point; a
    second worker and beat's sweep recover the run."""
    asks = tmp_path / "asks"
    env = {
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,harness.openai_agents_agent",
        "RUNLEDGER_OA_ASKS": str(asks),
    }
    with Cluster(tmp_path, lease_seconds=2, sweep_seconds=0.5, env=env) as cluster:
        run_id = start()
        victim = cluster.worker(
            "victim", env={"RUNLEDGER_KILL_AT": kill_at, "RUNLEDGER_KILL_SCOPE": "group"}
        )
        cluster.send(start_run, run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=90), cluster.log("victim")
        assert victim.returncode == -9, cluster.log("victim")
        assert Run.objects.get(pk=run_id).status == "running"
        before = rows(run_id)
        sent = set(ProviderCharge.objects.values_list("idempotency_key", flat=True))
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: settled(run_id), timeout=120), cluster.log("rescuer")
    run = Run.objects.get(pk=run_id)
    after = rows(run_id)
    for step_id, row in before.items():  # what had finished replayed untouched
        if row.status == "succeeded":
            assert (after[step_id].attempt, after[step_id].result) == (row.attempt, row.result)
        assert after[step_id].effect_key == row.effect_key, step_id
    if kill_at == "notify.before_effect":
        assert (run.status, run.blocked_step_id) == (
            "needs_attention",
            "openai.turn.3.tools.0.notify_team",
        ), run.detail
        assert Notification.objects.count() == 0  # not sent blindly a second time
        assert asked(asks) == {1: 1, 2: 1, 3: 1}
        return
    assert (run.status, run.executions, run.resume_count) == ("succeeded", 2, 1), run.detail
    assert run.result == {"text": example.FINAL}  # what an uninterrupted run answers
    assert asked(asks) == {1: 1, 2: 1, 3: 1, 4: 1}
    if kill_at == "oa.model@2":  # the request killed mid-flight had no answer: asked again
        assert asked(asks, "sent ") == {1: 1, 2: 2, 3: 1, 4: 1}
    else:
        assert asked(asks, "sent ") == {1: 1, 2: 1, 3: 1, 4: 1}
    assert chain(after) == list(EXPECTED_STEPS)
    settled_by_lookup = [r for r in after.values() if r.effect_key in sent]
    assert len(settled_by_lookup) == len(sent) and all(r.attempt == 1 for r in settled_by_lookup)
    effects_once()
    connection.close()


class _Scripted(example.Model):
    """A fake SDK model per agent: ``answers[n]`` for its n-th request in a run."""

    def __init__(self, name: str, answers: list[Any], asked: list[str]) -> None:
        self.name, self.answers, self.asked = name, answers, asked

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self.asked.append(self.name)
        n = sum(1 for a in self.asked if a == self.name) - 1
        usage = example.Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
        return example.ModelResponse(output=[self.answers[n]], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_handoffs_and_agents_as_tools_keep_stable_step_ids(execute: Any) -> None:
    from agents import Agent as SDKAgent
    from agents import handoff

    from ledger.agents import agent

    asked: list[str] = []
    models = {
        "triage": [
            example._call("t1", "research", input="inv_1001"),
            example._call("t2", "transfer_to_closer"),
        ],
        "researcher": [example._message("inv_1001 was double billed")],
        "closer": [example._message("closed")],
    }

    class Provider(example.ModelProvider):
        def get_model(self, name: str | None) -> Any:
            return _Scripted(str(name), models[str(name)], asked)

    researcher = SDKAgent(name="researcher", model="researcher")
    closer = SDKAgent(name="closer", model="closer")
    triage = SDKAgent(
        name="triage",
        model="triage",
        tools=[researcher.as_tool(tool_name="research", tool_description="look it up")],
        handoffs=[handoff(closer)],
    )

    @agent("oa_triage_test", tools=[])
    def triage_run(ctx: Any, inputs: Any) -> Any:
        asked.clear()  # counts per execution
        return openai_agents.run(ctx, triage, "help", model_provider=Provider()).final_output

    run_id = transitions.run_start(agent="oa_triage_test", inputs={}).run_id
    outcome = execute(run_id)
    assert (outcome.status, outcome.result) == ("succeeded", "closed"), outcome
    expected = [
        "openai.turn.1",
        "openai.turn.1.tools.0.research.turn.1",
        "openai.turn.2",
        "openai.turn.3",
    ]
    ledger = rows(run_id)
    assert list(ledger) == expected
    assert ledger["openai.turn.3"].inputs["system"] is None and asked == [
        "triage",
        "researcher",
        "triage",
        "closer",
    ]
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(run_id=run_id, by="test", reason="replay", seen_version=None)
    again = execute(run_id, worker="worker-2")
    assert (again.status, again.result) == ("succeeded", "closed")
    assert list(rows(run_id)) == expected and asked == []  # replayed: nobody asked again


DOCS = Path(__file__).resolve().parents[3] / "docs" / "authors" / "openai-agents.md"


def test_the_docs_example_runs_against_a_model_server_on_loopback(
    execute: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's opening example, as written, on the real SDK's Chat Completions model."""
    from ledger import registry
    from tests.support.llm_wire import WireModel

    text = DOCS.read_text()
    example_code = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(example_code.splitlines()) <= 40
    with WireModel() as served:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{served.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        namespace: dict[str, Any] = {"__name__": "docs_openai_agents"}
        exec(compile(example_code, str(DOCS), "exec"), namespace)
        try:
            run_id = transitions.run_start(
                agent="billing_agent", inputs={"ask": "Please refund invoices inv_1001, inv_1003."}
            ).run_id
            outcome = execute(run_id)
        finally:
            registry.unregister_agent("billing_agent")
        assert outcome.status == "succeeded", outcome
        assert outcome.result == {"text": "Refunded and emailed every customer."}
        assert served.turns_asked() == {1: 1, 2: 1, 3: 1, 4: 1}
    assert [r.kind for r in rows(run_id).values()].count("effect") == 4
    assert ProviderCharge.objects.count() == 2


def start_gated(name: str) -> str:
    """A queued run of agent ``name``: the refund agent with ``notify_team`` behind
    ``needs_approval`` (its third turn's call waits at the gate)."""
    from ledger.agents import agent

    gated = example.refund_agent()
    gated.tools = [
        *gated.tools[:2],
        openai_agents.function_tool(example.notify_team, needs_approval=True),
    ]

    @agent(name, tools=openai_agents.ledger_tools(gated))
    def gated_run(ctx: Any, inputs: Any) -> Any:
        result = openai_agents.run(
            ctx,
            gated,
            "Please refund invoices inv_1001 and inv_1003.",
            model_provider=example.ScriptedProvider(),
        )
        return {"text": result.final_output}

    return transitions.run_start(agent=name, inputs={}).run_id


def test_needs_approval_on_an_effect_is_the_approval_gate(
    asks: Path, execute: Any, people: Any, clock: Any
) -> None:
    """``function_tool(effect, needs_approval=True)``: the run waits at runledger's gate for
    the exact arguments; approved, the effect is sent once and the run finishes."""
    from ledger.models import Gate

    run_id = start_gated("oa_gated_test")
    outcome = execute(run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "approval"), outcome
    assert outcome.step_id == "openai.turn.3.tools.0.notify_team"
    gate = Gate.objects.get(run_id=run_id)
    assert gate.arguments_text == '{"channel":"#billing","text":"refunded 2 invoices"}'
    assert Notification.objects.count() == 0
    assert "openai.turn.3.tools.0.notify_team" not in rows(run_id)  # no intent row
    transitions.gate_approve(gate=gate, by=people.bob, reason="ok", clock=clock)
    done = execute(run_id, worker="worker-2")
    assert (done.status, done.result) == ("succeeded", {"text": example.FINAL}), done
    assert asked(asks) == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


def test_a_rejected_needs_approval_call_tells_the_model_as_the_sdk_does(
    asks: Path, execute: Any, people: Any, clock: Any
) -> None:
    """Rejected at runledger's gate, a ``needs_approval`` call is never sent and the model is
    given the SDK's own rejection message as the call's output; the run goes on to its end."""
    from agents.tool import DEFAULT_APPROVAL_REJECTION_MESSAGE

    from ledger.models import Gate

    run_id = start_gated("oa_rejected_test")
    outcome = execute(run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "approval"), outcome
    transitions.gate_reject(
        gate=Gate.objects.get(run_id=run_id), by=people.bob, reason="not now", clock=clock
    )
    done = execute(run_id, worker="worker-2")
    assert done.status == "succeeded", done
    assert Notification.objects.count() == 0
    rejected = rows(run_id)["openai.turn.3.tools.0.notify_team"]  # the rejection, recorded
    assert (rejected.status, rejected.effect_key) == ("failed", None)  # no intent: never sent
    assert "rejected by bob: not now" in rejected.error
    assert openai_agents.REJECTED == DEFAULT_APPROVAL_REJECTION_MESSAGE
    last_turn = rows(run_id)["openai.turn.4"]
    assert DEFAULT_APPROVAL_REJECTION_MESSAGE in json.dumps(last_turn.inputs)
