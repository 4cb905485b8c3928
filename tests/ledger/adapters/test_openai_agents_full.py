"""The OpenAI Agents SDK adapter on an agent written as the SDK's docs write it
(``tests.support.openai_agents_full``): an async tool called twice in one answer, a sub-agent
through ``as_tool`` with its own tool, a ``LedgerSession``, an MCP server's tool declared an
effect by name, effects with and without a lookup, every turn streamed. On the real ledger;
every test asserts rows, the fake model's asks and the downstream tables after the act."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

pytest.importorskip("agents")
pytest.importorskip("fastmcp")

from harness.cluster import Cluster, wait_for
from ledger import registry, transitions, waiting
from ledger.adapters import openai_agents
from ledger.agents import agent
from ledger.errors import AgentDefinitionError
from ledger.examples.models import LedgerEntry, Notification, ProviderCharge
from ledger.models import Run
from runs.operations.tasks import start_run
from tests.support import openai_agents_full as full
from tests.support.chains import chain, rows

pytestmark = pytest.mark.django_db(transaction=True)
assert connection  # the skipif conditions below read it

TOOL_STEPS = {
    "openai.turn.1": "model",
    "openai.turn.1.tools.0.fetch_invoice": "read",
    "openai.turn.1.tools.1.fetch_invoice": "read",
    "openai.turn.2": "model",
    "openai.turn.2.tools.0.research.turn.1": "model",
    "openai.turn.2.tools.0.research.turn.1.tools.0.billing_history": "read",
    "openai.turn.2.tools.0.research.turn.2": "model",
    "openai.turn.3": "model",
    "openai.turn.3.tools.0.refund_charge": "effect",
    "openai.turn.3.tools.1.refund_charge": "effect",
    "openai.turn.4": "model",
    "openai.turn.4.tools.0.post_entry": "effect",
    "openai.turn.5": "model",
    "openai.turn.5.tools.0.notify_team": "effect",
    "openai.turn.6": "model",
}
ALL_ASKED = {
    "desk 1": 1,
    "desk 2": 1,
    "researcher 1": 1,
    "researcher 2": 1,
    "desk 3": 1,
    "desk 4": 1,
    "desk 5": 1,
    "desk 6": 1,
}


def counted(path: Path, prefix: str = "") -> dict[str, int]:
    """The lines of the asks file (``prefix="sent "``: the requests received)."""
    lines = path.read_text().splitlines() if path.exists() else []
    if prefix:
        return dict(Counter(x.removeprefix(prefix) for x in lines if x.startswith(prefix)))
    return dict(Counter(x for x in lines if x.split(" ")[0] in ("desk", "researcher")))


def effects_once() -> None:
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert LedgerEntry.objects.count() == 1
    assert Notification.objects.count() == 1


@pytest.fixture
def asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "asks"
    monkeypatch.setenv("RUNLEDGER_OAF_ASKS", str(path))
    return path


def start(conversation: str = "conv-1") -> str:
    return transitions.run_start(agent="oa_full", inputs={"conversation": conversation}).run_id


def tool_steps(run_id: str) -> dict[str, str]:
    return {k: r.kind for k, r in rows(run_id).items() if ".session." not in k}


def test_the_agent_as_the_docs_write_it_is_steps_and_a_replay_asks_and_sends_nothing(
    asks: Path, execute: Any
) -> None:
    run_id = start()
    heard: list[tuple[str, str]] = []  # the run's live readers (?live=true): model text
    stop = waiting.hear(run_id, lambda step_id, text: heard.append((step_id, text)))
    first = execute(run_id)
    assert (first.status, first.result) == ("succeeded", {"text": full.FINAL}), first
    assert tool_steps(run_id) == TOOL_STEPS
    ledger = rows(run_id)
    # the sub-agent's own tool is a step under the as_tool call, and ran once
    assert asks.read_text().splitlines().count("history") == 1
    # the MCP tool named in effects= is an effect: its server received the key in _meta
    entry = ledger["openai.turn.4.tools.0.post_entry"]
    assert entry.effect_key == f"{run_id}:openai.turn.4.tools.0.post_entry"
    assert LedgerEntry.objects.get().memo == entry.effect_key
    # the session: its operations are steps, its items derived from them
    session = [k for k in ledger if ".session." in k]
    assert session and all(ledger[k].kind == "read" for k in session), session
    assert chain(ledger) == list(ledger)
    items = asyncio.run(openai_agents.LedgerSession("conv-1").get_items())
    said = [i.get("content") for i in items if i.get("role") == "user"]
    assert said == ["Please refund invoices inv_1001 and inv_1003."], items
    assert items[-1]["type"] == "message"  # the final answer is the last item
    # the live stream: the final answer's text came as deltas while it was live
    deltas = "".join(
        x.removeprefix("delta ") for x in asks.read_text().splitlines() if x.startswith("delta")
    )
    assert deltas.replace(" ", "") == full.FINAL.replace(" ", "")

    # and the live readers heard them, from the final turn's model step, never stored
    def final_text() -> str:
        return "".join(t for step_id, t in heard if step_id == "openai.turn.6")

    assert wait_for(lambda: final_text() == full.FINAL, timeout=60), heard
    assert {TOOL_STEPS[step_id] for step_id, _t in heard} == {"model"}, heard
    live_heard = list(heard)
    assert counted(asks) == ALL_ASKED
    effects_once()

    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(
        run_id=run_id, by="test", reason="replay", seen_version=None, anyway=True
    )
    again = execute(run_id, worker="worker-2")
    assert (again.status, again.result) == ("succeeded", first.result), again
    assert counted(asks) == ALL_ASKED  # nobody asked again
    stop()
    assert heard == live_heard  # a replayed turn sends no live text
    assert asks.read_text().splitlines().count("history") == 1  # the sub-agent's tool too
    assert list(rows(run_id)) == list(ledger)
    effects_once()
    assert asyncio.run(openai_agents.LedgerSession("conv-1").get_items()) == items

    # the next run of the conversation reads what this one recorded
    second = start()
    assert execute(second).status == "succeeded"
    got = next(r for k, r in rows(second).items() if k.endswith(".get"))
    assert got.result == items


def test_what_the_docs_call_not_durable_is_refused_inside_a_run(execute: Any) -> None:
    from agents import Runner, SQLiteSession

    seen: dict[str, str] = {}

    def refused(name: str, call: Any) -> None:
        try:
            call()
        except AgentDefinitionError as exc:
            seen[name] = str(exc)

    def body(ctx: Any, inputs: Any) -> Any:
        desk = full.desk()
        provider = full.FakeProvider()
        refused("run", lambda: Runner.run_sync(desk, "hi"))
        refused("streamed", lambda: Runner.run_streamed(desk, "hi"))
        refused(
            "session",
            lambda: openai_agents.run(
                ctx, desk, "hi", model_provider=provider, session=SQLiteSession("s")
            ),
        )
        refused(
            "chained",
            lambda: openai_agents.run(
                ctx, desk, "hi", model_provider=provider, previous_response_id="resp_1"
            ),
        )
        refused("effects", lambda: openai_agents.run(ctx, desk, "hi", effects=["post_entry"]))
        refused(
            "own kind",
            lambda: openai_agents.run(ctx, desk, "hi", effects={"refund_charge": None}),
        )
        refused("key", openai_agents.effect_key)
        return "ok"

    agent("oa_refusals")(body)
    try:
        run_id = transitions.run_start(agent="oa_refusals", inputs={}).run_id
        outcome = execute(run_id)
    finally:
        registry.unregister_agent("oa_refusals")
    assert (outcome.status, outcome.result) == ("succeeded", "ok"), outcome
    assert "Runner.run_sync directly inside runledger run" in seen["run"]
    assert "Runner.run_streamed directly inside runledger run" in seen["streamed"]
    assert "session=SQLiteSession keeps the conversation outside the ledger" in seen["session"]
    assert "previous_response_id" in seen["chained"]
    assert "maps tool names to their lookups" in seen["effects"]
    assert "its kind is its own declaration" in seen["own kind"]
    assert "outside an effect" in seen["key"]
    assert rows(run_id) == {}  # nothing ran, nothing was written
    with pytest.raises(AgentDefinitionError, match="items are added by the runs"):
        asyncio.run(openai_agents.LedgerSession("conv-9").add_items([{"role": "user"}]))
    with pytest.raises(AgentDefinitionError, match="1 to 200 characters"):
        openai_agents.LedgerSession("")


def settled(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status not in ("queued", "running")


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    "kill_at",
    [
        "charge.after_effect",  # (a) a refund sent, its result not recorded: the lookup settles it
        "ledger.after_effect",  # (a) the MCP server's effect booked, its result not recorded
        "oaf.model@3",  # (b) inside a model request (the sub-agent's first)
        "openai_agents.before_model@6",  # (c) between turns: turn 3's refunds recorded
        "notify.before_effect",  # (d) inside the effect without a lookup: a person decides
    ],
)
def test_a_worker_killed_mid_run_resumes_to_the_uninterrupted_result(
    kill_at: str, tmp_path: Path
) -> None:
    """The whole ``celery -A runs worker`` is SIGKILLed at the point; a second worker and
    beat's sweep recover the run: the result of an uninterrupted run, each effect sent once
    per key, each recorded model answer asked once, the sub-agent's tool run once."""
    asks = tmp_path / "asks"
    env = {
        "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents,tests.support.openai_agents_full",
        "RUNLEDGER_OAF_ASKS": str(asks),
    }
    with Cluster(tmp_path, lease_seconds=2, sweep_seconds=0.5, env=env) as cluster:
        run_id = start(f"conv-{kill_at}")
        victim = cluster.worker(
            "victim", env={"RUNLEDGER_KILL_AT": kill_at, "RUNLEDGER_KILL_SCOPE": "group"}
        )
        cluster.send(start_run, run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=90), cluster.log("victim")
        assert victim.returncode == -9, cluster.log("victim")
        before = rows(run_id)
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: settled(run_id), timeout=120), cluster.log("rescuer")
    run = Run.objects.get(pk=run_id)
    after = rows(run_id)
    for step_id, row in before.items():  # what had finished replayed untouched
        if row.status == "succeeded":
            assert (after[step_id].attempt, after[step_id].result) == (row.attempt, row.result)
    assert asks.read_text().splitlines().count("history") == 1
    if kill_at == "notify.before_effect":
        assert (run.status, run.blocked_step_id) == (
            "needs_attention",
            "openai.turn.5.tools.0.notify_team",
        ), run.detail
        assert Notification.objects.count() == 0  # not sent blindly a second time
        assert counted(asks) == {k: v for k, v in ALL_ASKED.items() if k != "desk 6"}
        return
    assert (run.status, run.executions, run.resume_count) == ("succeeded", 2, 1), run.detail
    assert run.result == {"text": full.FINAL}
    assert {k: r.kind for k, r in after.items() if ".session." not in k} == TOOL_STEPS
    assert counted(asks) == ALL_ASKED  # every recorded answer asked once
    sent = counted(asks, "sent ")
    if kill_at == "oaf.model@3":  # the request killed mid-flight had no answer: asked again
        assert sent == {**ALL_ASKED, "researcher 1": 2}, sent
    else:
        assert sent == ALL_ASKED, sent
    assert chain(after) == list(after)
    effects_once()
    connection.close()
