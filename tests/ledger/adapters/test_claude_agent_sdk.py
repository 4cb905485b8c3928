"""The Claude Agent SDK adapter (``ledger.adapters.claude_agent_sdk``) with the SDK's REAL
bundled CLI, pointed at a loopback Messages API (``tests/support/llm_wire_claude.py``) through
the adapter's model proxy: its ``SessionStore`` under the SDK's own conformance suite, model
requests and tool calls as ledger steps, a real Celery worker SIGKILLed between a tool's intent
and its result, inside a model request and between two turns, a changed system prompt as a
stale model step on the dashboard, upstream errors, a fork, and the refusals.

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

from html import unescape

from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk.testing import run_session_store_conformance
from django.test import Client
from django.urls import reverse

from harness.cluster import Cluster, wait_for
from ledger import canonical, registry, transitions
from ledger.adapters import claude_agent_sdk as adapter
from ledger.agents import agent, tool
from ledger.errors import AgentDefinitionError
from ledger.examples.models import Notification, ProviderCharge
from ledger.models import ClaudeSessionEntry, Run, Step
from runs.operations.tasks import start_run
from tests.support import claude_agents
from tests.support.dashboard_runs import restore_roles, user_in
from tests.support.llm_wire_claude import ClaudeWire

pytestmark = pytest.mark.django_db(transaction=True)
PROMPT = "Refund invoices inv_1001 and inv_1003."
WAIT = 180  # seconds a condition may take on a loaded machine (a CLI start is ~1 s idle)
EXPECTED = {  # in chain order: ask, do what the answer asks, ask again
    "claude.model.0": ("model", "succeeded"),
    "claude.0.fetch_invoice": ("read", "succeeded"),
    "claude.1.fetch_invoice": ("read", "succeeded"),
    "claude.model.1": ("model", "succeeded"),
    "claude.2.refund_charge": ("effect", "succeeded"),
    "claude.model.2": ("model", "succeeded"),
    "claude.3.notify_team": ("effect", "succeeded"),
    "claude.model.3": ("model", "succeeded"),
}
ONCE = {"fetch": 1, "refund": 1, "notify": 1, "answer": 1}  # each model request asked once
TURNS = 5  # the CLI's num_turns of the uninterrupted session


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
    rows = Step.objects.filter(run=run_id).order_by("seq")
    return {s.step_id: (s.kind, s.status) for s in rows}


def chain(run_id: str) -> list[str]:
    """The step ids along the recorded path (next_step_id), from the first."""
    rows = {s.step_id: s for s in Step.objects.filter(run=run_id)}
    pointed = {s.next_step_id for s in rows.values()}
    current = next((k for k in rows if k not in pointed), None)
    out = []
    while current is not None:
        out.append(current)
        current = rows[current].next_step_id
    return out


def answer(run_id: str) -> str:
    """What an uninterrupted run answers: the refund's charge id, named by the model."""
    charge = ProviderCharge.objects.get(idempotency_key=f"{run_id}:claude.2.refund_charge")
    return f"Refunded {charge.charge_id} and told the team."


def uninterrupted(run_id: str) -> dict[str, Any]:
    """The result an uninterrupted run of ``run_id`` has."""
    return {"text": answer(run_id), "session_id": adapter.session_id_for(run_id), "turns": TURNS}


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
    assert outcome.result == uninterrupted(run.run_id)
    assert steps(run.run_id) == EXPECTED and chain(run.run_id) == list(EXPECTED)
    refund = Step.objects.get(run=run.run_id, step_id="claude.2.refund_charge")
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}
    assert ProviderCharge.objects.count() == Notification.objects.count() == 1
    assert model.decisions() == ONCE
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


# --- the CLI's model requests as model steps (the adapter's proxy) ---------------------------


def test_each_model_request_is_a_step_hashed_over_the_request_that_matters(
    model: ClaudeWire, execute: Any
) -> None:
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    assert execute(run.run_id).status == "succeeded"
    first = Step.objects.get(run=run.run_id, step_id="claude.model.0")
    asked = model.bodies[0]
    assert first.model_id == "claude-sonnet-4-5"
    # What the model is asked, as the CLI sent it, less the per-execution noise.
    request = first.inputs
    assert request["messages"][0]["content"][-1]["text"] == PROMPT
    assert request["tools"] == asked["tools"] and "metadata" in asked
    assert "metadata" not in request and "claude-code-20250219" in request["betas"]
    said = [b["text"] for b in request["system"]]
    assert claude_agents.SYSTEM_PROMPT in said
    assert not any(t.startswith("x-anthropic-billing-header") for t in said)
    assert "Today's date is <date>." in canonical.dumps(request["messages"][0])
    # The answer is recorded whole: the events the CLI was streamed.
    events = [name for name, _data in first.result["events"]]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert first.result["stream"] is True


def test_a_run_executed_again_answers_every_model_request_from_the_ledger(
    model: ClaudeWire, execute: Any
) -> None:
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    first = execute(run.run_id)
    Run.objects.filter(pk=run.run_id).update(status="failed")
    transitions.run_resume(run_id=run.run_id, by="test", reason="replay", seen_version=None)
    again = execute(run.run_id, worker="worker-2")
    assert again.status == "succeeded", again
    assert again.result == first.result == uninterrupted(run.run_id)
    # The second execution ran the CLI again from the prompt: every answer and every tool
    # result came from the ledger; the model was asked nothing, nothing was sent again.
    assert model.decisions() == ONCE
    assert (again.replayed, again.executed) == (len(EXPECTED), 0)
    assert ProviderCharge.objects.count() == Notification.objects.count() == 1
    # Its own transcript (the second session) says the whole conversation again.
    sessions = ClaudeSessionEntry.objects.values_list("session_id", flat=True).distinct()
    assert len(set(sessions)) == 2
    said = [m["step_id"] for m in adapter.transcript(run.run_id) if m["role"] == "tool"]
    assert said == [k for k in EXPECTED if not k.startswith("claude.model")]


def test_an_upstream_error_is_handed_to_the_cli_and_records_nothing(
    model: ClaudeWire, execute: Any
) -> None:
    model.fail(400, times=5)  # more than the CLI's retries of it: the session ends
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    outcome = execute(run.run_id)
    assert outcome.status == "failed", outcome
    error = str(Run.objects.get(pk=run.run_id).error)
    assert "the model's API answered 400" in error and "refused" in error, error
    assert not Step.objects.filter(run=run.run_id).exists()
    assert model.bodies == [] and ProviderCharge.objects.count() == 0


def test_an_overloaded_upstream_is_retried_by_the_cli_as_the_same_step(
    model: ClaudeWire, execute: Any
) -> None:
    model.fail(529)  # overloaded: the CLI retries it after a short backoff
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    assert steps(run.run_id) == EXPECTED and model.decisions() == ONCE
    assert Step.objects.get(run=run.run_id, step_id="claude.model.0").attempt == 1


def test_a_changed_system_prompt_between_crash_and_resume_is_a_stale_model_step_with_its_diff(
    model: ClaudeWire, execute: Any, crash_at: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "RUNLEDGER_PREVIEW_SECONDS", 120.0, raising=False)
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    crash_at("claude.model.after_record")  # the first answer recorded; then the crash
    execute(run.run_id, crash_expected=True)
    new_prompt = "You refund invoices for the billing team, and you are brief."
    monkeypatch.setenv("RUNLEDGER_CLAUDE_SYSTEM_PROMPT", new_prompt)  # a deploy meanwhile
    outcome = execute(run.run_id, worker="worker-2")
    stopped = Run.objects.get(pk=run.run_id)
    assert (outcome.status, stopped.reason) == ("needs_attention", "stale"), stopped.detail
    assert stopped.blocked_step_id == "claude.model.0"
    assert model.decisions() == {"fetch": 1}  # not asked again under the new prompt
    assert ProviderCharge.objects.count() == 0
    # The operator's stale page: the diff of the stored request and today's, the system prompt.
    restore_roles()
    client = Client()
    client.force_login(user_in("operator"))
    step = Step.objects.get(run=run.run_id, step_id="claude.model.0")
    page = client.get(reverse("runs:stale", args=[run.run_id, step.pk]))
    assert page.status_code == 200
    text = unescape(page.content.decode())
    diff = text.split('class="diff"', 1)[1].split("</pre>", 1)[0]
    assert claude_agents.SYSTEM_PROMPT in diff and new_prompt in diff, diff
    assert "metadata" not in diff and "device_id" not in text


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


def recovered_as_if_uninterrupted(run_id: str, model: ClaudeWire, cluster: Cluster) -> None:
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.resume_count) == ("succeeded", 1), cluster.log("rescuer")
    # Each model request reached the model once across the crash (the rescuer's CLI walked
    # the recorded ones from the ledger), each effect was sent once, and the run's output is
    # an uninterrupted run's.
    assert model.decisions() == ONCE, model.decisions()
    assert ProviderCharge.objects.count() == 1 and Notification.objects.count() == 1
    assert steps(run_id) == EXPECTED and chain(run_id) == list(EXPECTED)
    assert run.result == uninterrupted(run_id)


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_worker_killed_after_the_refund_was_sent_recovers_it_through_its_lookup(
    cluster: Cluster, model: ClaudeWire
) -> None:
    run_id = kill_at(cluster, "charge.after_effect")
    recovered_as_if_uninterrupted(run_id, model, cluster)
    # Sent once: the ledger answered the refund from the provider's lookup.
    refund = Step.objects.get(run=run_id, step_id="claude.2.refund_charge")
    assert refund.attempt == 1


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_worker_killed_inside_a_model_request_does_not_ask_it_again(
    cluster: Cluster, model: ClaudeWire
) -> None:
    # The second answer (the refund) is recorded; the CLI has not got it yet when all dies.
    run_id = kill_at(cluster, "claude.model.after_record@2")
    recovered_as_if_uninterrupted(run_id, model, cluster)


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_worker_killed_between_two_turns_does_not_ask_the_finished_ones_again(
    cluster: Cluster, model: ClaudeWire
) -> None:
    # The refund is done and recorded; the third request (for the notification) not yet sent.
    run_id = kill_at(cluster, "claude.model.before_forward@3")
    recovered_as_if_uninterrupted(run_id, model, cluster)


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


# --- the author's own MCP server's tool, declared an effect ------------------------------------


def test_an_authors_mcp_tool_declared_an_effect_passes_the_same_hooks(
    model: ClaudeWire, execute: Any
) -> None:
    """``run_session(effects={"notify_team": None})`` on a tool of the author's own in-process
    MCP server: a step like runledger's own, intent first, the key inside its handler, and a
    re-execution answers it from the ledger without calling the handler again."""
    run = transitions.run_start(agent="claude_refund_mcp", inputs={"prompt": PROMPT})
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    assert steps(run.run_id) == EXPECTED and chain(run.run_id) == list(EXPECTED)
    note = Step.objects.get(run=run.run_id, step_id="claude.3.notify_team")
    assert note.effect_key == f"{run.run_id}:claude.3.notify_team"
    assert note.inputs == {"channel": "#refunds", "text": note.inputs["text"]}
    assert Notification.objects.count() == 1 and model.decisions() == ONCE
    Run.objects.filter(pk=run.run_id).update(status="failed")
    transitions.run_resume(
        run_id=run.run_id, by="test", reason="replay", seen_version=None, anyway=True
    )
    again = execute(run.run_id, worker="worker-2")
    assert again.status == "succeeded" and again.result["text"] == outcome.result["text"]
    assert Notification.objects.count() == 1 and model.decisions() == ONCE  # nothing again
    with pytest.raises(AgentDefinitionError, match="none of the options' in-process MCP"):
        adapter.run_session(None, "hi", tools=[], effects={"wire_money": None})  # type: ignore[arg-type]
    with pytest.raises(AgentDefinitionError, match="outside an effect"):
        adapter.effect_key()


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_a_worker_killed_inside_an_authors_mcp_effect_stops_the_run_for_a_person(
    cluster: Cluster, model: ClaudeWire
) -> None:
    run = transitions.run_start(agent="claude_refund_mcp", inputs={"prompt": PROMPT})
    victim = cluster.worker(
        "victim", env={"RUNLEDGER_KILL_AT": "notify.before_effect", "RUNLEDGER_KILL_SCOPE": "group"}
    )
    cluster.send(start_run, run.run_id)
    assert wait_for(lambda: victim.poll() is not None, timeout=WAIT), cluster.log("victim")
    cluster.worker("rescuer")
    cluster.beat()
    assert wait_for(lambda: finished(run.run_id), timeout=WAIT), cluster.log("rescuer")
    stopped = Run.objects.get(pk=run.run_id)
    assert (stopped.status, stopped.reason) == ("needs_attention", "reconciliation")
    assert stopped.blocked_step_id == "claude.3.notify_team"
    assert ProviderCharge.objects.count() == 1 and Notification.objects.count() == 0
    assert steps(run.run_id)["claude.3.notify_team"] == ("effect", "started")  # intent first


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
