"""The Claude Agent SDK adapter (``ledger.adapters.claude_agent_sdk``) with the SDK's REAL
bundled CLI, pointed at a loopback Messages API (``tests/support/llm_wire_claude.py``): its
``SessionStore`` under the SDK's own conformance suite, tool calls through the ledger, a real
Celery worker SIGKILLed between a tool's intent and its result, a fork, and the refusals.

Every test asserts the ledger, the stored transcript and the simulators' tables after the act.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk.testing import run_session_store_conformance

from harness.cluster import Cluster, wait_for
from ledger import registry, transitions
from ledger.adapters import claude_agent_sdk as adapter
from ledger.agents import agent, tool
from ledger.errors import AgentDefinitionError
from ledger.examples.models import Notification, ProviderCharge
from ledger.models import ClaudeSessionEntry, Run, Step
from runs.operations.tasks import start_run
from tests.support import claude_agents
from tests.support.llm_wire_claude import ClaudeWire

pytestmark = pytest.mark.django_db(transaction=True)
PROMPT = "Refund invoices inv_1001 and inv_1003."
WAIT = 180  # seconds a condition may take on a loaded machine (a CLI start is ~1 s idle)
EXPECTED = {
    "claude.0.fetch_invoice": ("read", "succeeded"),
    "claude.1.fetch_invoice": ("read", "succeeded"),
    "claude.2.refund_charge": ("effect", "succeeded"),
    "claude.3.notify_team": ("effect", "succeeded"),
}


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClaudeWire]:
    with ClaudeWire() as served:
        for name, value in served.env.items():
            monkeypatch.setenv(name, value)
        yield served


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def steps(run_id: str) -> dict[str, tuple[str, str]]:
    return {s.step_id: (s.kind, s.status) for s in Step.objects.filter(run=run_id)}


def answer(run_id: str) -> str:
    """What an uninterrupted run answers: the refund's charge id, named by the model."""
    charge = ProviderCharge.objects.get(idempotency_key=f"{run_id}:claude.2.refund_charge")
    return f"Refunded {charge.charge_id} and told the team."


# --- (a) the transcript: the SDK's SessionStore in the ledger's database ----------------------


@pytest.mark.anyio
async def test_the_store_passes_the_sdks_own_conformance_suite() -> None:
    async def fresh() -> adapter.LedgerSessionStore:
        await adapter._in_thread(lambda: ClaudeSessionEntry.objects.all().delete())
        return adapter.LedgerSessionStore()

    await run_session_store_conformance(fresh)


def test_an_entry_the_sdk_retries_is_stored_once() -> None:
    store = adapter.LedgerSessionStore()
    key = {"project_key": "p", "session_id": "s"}
    batch = [{"type": "user", "uuid": "u1", "n": 1}, {"type": "title", "t": "x"}]
    store.append_sync(key, batch)
    store.append_sync(key, batch)
    assert store.load_sync(key) == [*batch, {"type": "title", "t": "x"}]


def test_a_transcript_entry_that_is_not_an_object_is_refused_and_nothing_is_written() -> None:
    store = adapter.LedgerSessionStore()
    key = {"project_key": "p", "session_id": "s"}
    with pytest.raises(TypeError, match="must be a JSON object"):
        store.append_sync(key, [{"type": "user", "uuid": "u1"}, "not an entry"])
    assert not ClaudeSessionEntry.objects.exists()


# --- (b) a session's tool calls through the ledger --------------------------------------------


def test_a_session_runs_its_reads_and_effects_through_the_ledger(
    model: ClaudeWire, execute: Any
) -> None:
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result["text"] == answer(run.run_id)
    assert outcome.result["session_id"] == adapter.session_id_for(run.run_id)
    assert steps(run.run_id) == EXPECTED
    refund = Step.objects.get(run=run.run_id, step_id="claude.2.refund_charge")
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}
    assert ProviderCharge.objects.count() == Notification.objects.count() == 1
    assert model.decisions() == {"fetch": 1, "refund": 1, "notify": 1, "answer": 1}
    said = adapter.transcript(run.run_id)
    assert said[0] == {
        "role": "user",
        "text": PROMPT,
        "time": said[0]["time"],
        "step_id": "",
    }
    tools = [(m["role"], m["step_id"]) for m in said if m["step_id"]]
    assert tools == [
        ("assistant", "claude.0.fetch_invoice"),
        ("assistant", "claude.1.fetch_invoice"),
        ("tool", "claude.0.fetch_invoice"),
        ("tool", "claude.1.fetch_invoice"),
        ("assistant", "claude.2.refund_charge"),
        ("tool", "claude.2.refund_charge"),
        ("assistant", "claude.3.notify_team"),
        ("tool", "claude.3.notify_team"),
    ]
    assert said[-1]["role"] == "assistant" and said[-1]["text"] == answer(run.run_id)


# --- (c) a fork of the run forks the session --------------------------------------------------


def test_a_fork_of_the_run_continues_a_fork_of_its_session(model: ClaudeWire, execute: Any) -> None:
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    assert execute(run.run_id).status == "succeeded"
    fork = transitions.run_fork(
        run_id=run.run_id,
        step_id="claude.2.refund_charge",
        by="root",
        reason="re-notify",
        confirm_resend=1,  # the notification after the fork point, sent again on purpose
    )
    outcome = execute(fork.run_id)
    assert outcome.status == "succeeded", outcome
    # The refund replayed from the copied ledger; only the notification after the fork point
    # was sent again, under the fork's key; the model was asked only for what followed.
    assert ProviderCharge.objects.count() == 1 and Notification.objects.count() == 2
    assert steps(fork.run_id) == EXPECTED
    assert outcome.result["text"] == answer(run.run_id)
    assert model.decisions() == {"fetch": 1, "refund": 1, "notify": 2, "answer": 2}
    sessions = set(ClaudeSessionEntry.objects.values_list("run_id", "session_id"))
    assert len(sessions) == 2 and {r for r, _ in sessions} == {run.run_id, fork.run_id}
    forked = [m["step_id"] for m in adapter.transcript(fork.run_id) if m["role"] == "tool"]
    assert forked == [
        "claude.0.fetch_invoice",
        "claude.1.fetch_invoice",
        "claude.2.refund_charge",
        "claude.3.notify_team",
    ]


# --- a real worker SIGKILLed between a tool's intent and its result ---------------------------


@pytest.fixture
def cluster(tmp_path: Path, model: ClaudeWire) -> Iterator[Cluster]:
    env = {
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,tests.support.claude_agents",
        "PYTHONPATH": str(settings.BASE_DIR),
        **model.env,
    }
    with Cluster(tmp_path, lease_seconds=3, sweep_seconds=0.5, lost_after=2, env=env) as c:
        yield c
    connection.close()


def finished(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status in ("succeeded", "failed", "needs_attention")


def kill_at(cluster: Cluster, point: str) -> str:
    """Start a run on a worker that SIGKILLs its whole process group (its Claude CLI too) at
    ``point``; then a rescuer on another "host" (process, CLAUDE_CONFIG_DIR) takes it over."""
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    victim = cluster.worker(
        "victim", env={"RUNLEDGER_KILL_AT": point, "RUNLEDGER_KILL_SCOPE": "group"}
    )
    cluster.send(start_run, run.run_id)
    assert wait_for(lambda: victim.poll() is not None, timeout=WAIT), cluster.log("victim")
    assert Run.objects.get(pk=run.run_id).status == "running"
    cluster.worker("rescuer")
    cluster.beat()
    assert wait_for(lambda: finished(run.run_id), timeout=WAIT), cluster.log("rescuer")
    return run.run_id


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_worker_killed_after_the_refund_was_sent_recovers_it_through_its_lookup(
    cluster: Cluster, model: ClaudeWire
) -> None:
    run_id = kill_at(cluster, "charge.after_effect")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.resume_count) == ("succeeded", 1), cluster.log("rescuer")
    # Sent once: the rescuer's session asked the model again for the refund, and the ledger
    # answered it from the provider's lookup instead of charging twice.
    assert ProviderCharge.objects.count() == 1 and Notification.objects.count() == 1
    assert steps(run_id) == EXPECTED
    assert run.result["text"] == answer(run_id)
    # The rescuer resumed the dead worker's transcript from the database: the invoices were
    # fetched (and the model asked to fetch them) once, on the first host.
    assert model.decisions()["fetch"] == 1
    refund = Step.objects.get(run=run_id, step_id="claude.2.refund_charge")
    assert refund.attempt == 1


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_worker_killed_after_the_notification_was_sent_stops_the_run_for_a_person(
    cluster: Cluster, model: ClaudeWire
) -> None:
    run_id = kill_at(cluster, "notify.after_effect")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.reason) == ("needs_attention", "reconciliation"), cluster.log("rescuer")
    assert run.blocked_step_id == "claude.3.notify_team"
    # Sent once and not again: nobody can know whether it happened but a person.
    assert ProviderCharge.objects.count() == 1 and Notification.objects.count() == 1
    assert steps(run_id)["claude.3.notify_team"] == ("effect", "started")


# --- the docs page's example ----------------------------------------------------------------


DOCS = Path(settings.BASE_DIR) / "docs" / "authors" / "claude-agent-sdk.md"


def test_the_docs_pages_example_runs(model: ClaudeWire, execute: Any) -> None:
    text = DOCS.read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(example.splitlines()) <= 25
    if registry.get_agent("claude_refund_docs") is None:
        exec(compile(example, str(DOCS), "exec"), {"__name__": "docs_claude_example"})
    run = transitions.run_start(agent="claude_refund_docs", inputs={"prompt": PROMPT})
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result["text"] == answer(run.run_id)
    assert steps(run.run_id) == EXPECTED


# --- bad input --------------------------------------------------------------------------------


def test_a_version_outside_the_pinned_range_is_refused() -> None:
    with pytest.raises(AgentDefinitionError, match=r"claude-agent-sdk 0\.3\.1 is outside"):
        adapter.check_version("0.3.1")
    adapter.check_version("0.2.184")


def test_an_effect_without_a_way_to_receive_the_key_is_refused_at_registration() -> None:
    def post(text: str) -> dict[str, Any]:
        return {"ok": text}

    bad = registry.Tool(name="post", kind="effect", fn=post)
    with pytest.raises(AgentDefinitionError, match="effect tool 'post' has no idempotency_key"):
        adapter.check_tools([bad])
    with pytest.raises(AgentDefinitionError, match="takes runledger @tool functions"):
        adapter.check_tools([post])  # type: ignore[list-item]


def test_options_the_adapter_owns_are_refused_and_nothing_is_written(
    model: ClaudeWire, execute: Any
) -> None:
    run = transitions.run_start(agent="claude_owned_option", inputs={})
    outcome = execute(run.run_id)
    assert outcome.status == "failed"
    error = str(Run.objects.get(pk=run.run_id).error)
    assert "ClaudeAgentOptions.resume is set by runledger's adapter" in error
    assert not Step.objects.filter(run=run.run_id).exists()
    assert not ClaudeSessionEntry.objects.exists() and model.bodies == []


def test_a_tool_that_returns_something_not_json_fails_its_step_saying_which(
    model: ClaudeWire, execute: Any
) -> None:
    run = transitions.run_start(agent="claude_not_json", inputs={"prompt": PROMPT})
    outcome = execute(run.run_id)
    assert outcome.status == "failed", outcome
    row = Step.objects.get(run=run.run_id, step_id="claude.0.fetch_invoice")
    assert row.status == "failed" and "fetch_invoice" in row.error, row.error
    assert ProviderCharge.objects.count() == 0


@tool(kind="read", name="fetch_invoice")
def fetch_invoice_as_set(invoice_id: str) -> Any:
    return {invoice_id}  # a set is not JSON


@agent("claude_not_json", plan_version="1", tools=[fetch_invoice_as_set])
def claude_not_json(ctx: Any, inputs: dict[str, Any]) -> Any:
    options = ClaudeAgentOptions(model="claude-sonnet-4-5", tools=[], max_turns=4)
    return adapter.run_session(ctx, inputs["prompt"], tools=[fetch_invoice_as_set], options=options)


@agent("claude_owned_option", plan_version="1", tools=claude_agents.TOOLS)
def claude_owned_option(ctx: Any, inputs: dict[str, Any]) -> Any:
    options = ClaudeAgentOptions(resume="4e042b71-cfb0-5943-a71e-880e62b15a5b")
    return adapter.run_session(ctx, "hi", tools=claude_agents.TOOLS, options=options)
