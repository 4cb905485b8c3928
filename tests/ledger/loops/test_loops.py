"""The durable tool-use loops on the REAL ``anthropic`` and ``openai`` SDKs, against a model
provider on loopback that speaks each wire format (``tests/support/llm_wire.py``).

Every test asserts the ledger after the act, the provider's records (how often each turn was
asked) and the simulators' tables (how often each effect happened).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from harness.cluster import Cluster, database_url, wait_for
from ledger import registry, transitions
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import Run
from ledger.processes import execute
from runs.cli import EQUIPMENT_ENV  # the harness's commands, and the examples
from runs.operations.tasks import start_run
from tests.support.chains import chain, rows
from tests.support.llm_wire import WireModel

pytest.importorskip("anthropic")
pytest.importorskip("openai")

pytestmark = pytest.mark.django_db(transaction=True)
assert connection  # the skipif conditions below read it

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"
INVOICES = ["inv_1001", "inv_1003"]
APIS = ["anthropic", "openai"]


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireModel]:
    with WireModel() as served:
        for name, value in sdk_env(served).items():
            monkeypatch.setenv(name, value)
        yield served


def sdk_env(served: WireModel) -> dict[str, str]:
    return {
        "ANTHROPIC_BASE_URL": served.url,
        "ANTHROPIC_API_KEY": "test-key",
        "OPENAI_BASE_URL": f"{served.url}/v1",
        "OPENAI_API_KEY": "test-key",
    }


def start(api: str, **inputs: Any) -> str:
    run = transitions.run_start(
        agent="refund_loop", inputs={"invoice_ids": INVOICES, "api": api, **inputs}
    )
    return run.run_id


def settled(run_id: str) -> bool:
    return Run.objects.get(pk=run_id).status not in ("queued", "running")


def effects_once() -> None:
    """Each refund and each email happened exactly once (one row per key, two of each)."""
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    emails = Counter(OutboxMessage.objects.values_list("message_id", flat=True))
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert len(emails) == 2 and set(emails.values()) == {1}, emails
    assert sorted(ProviderCharge.objects.values_list("amount_cents", flat=True)) == [-4200, -990]


EXPECTED_STEPS = {
    "chat.turn.1": "model",
    "chat.turn.1.tools.0.fetch_invoice": "read",
    "chat.turn.1.tools.1.fetch_invoice": "read",
    "chat.turn.2": "model",
    "chat.turn.2.tools.0.refund_charge": "effect",
    "chat.turn.2.tools.1.refund_charge": "effect",
    "chat.turn.3": "model",
    "chat.turn.3.tools.0.send_email": "effect",
    "chat.turn.3.tools.1.send_email": "effect",
    "chat.turn.4": "model",
}


@pytest.mark.parametrize("api", APIS)
def test_a_loop_completes_a_multi_turn_run_with_parallel_tool_calls(
    api: str, model: WireModel, execute: Any
) -> None:
    run_id = start(api)
    outcome = execute(run_id)
    assert outcome.status == "succeeded", outcome
    assert outcome.result["text"] == "Refunded and emailed every customer."
    assert outcome.result["usage"]["turns"] == 4
    assert outcome.result["usage"]["attempts"] == 4
    assert outcome.result["usage"]["input_tokens"] > 0
    ledger = rows(run_id)
    assert {k: r.kind for k, r in ledger.items()} == EXPECTED_STEPS
    assert all(r.status == "succeeded" and r.attempt == 1 for r in ledger.values())
    assert ledger["chat.turn.1"].model_id == REFUND_MODELS[api]
    refund = ledger["chat.turn.2.tools.0.refund_charge"]
    assert refund.effect_key == f"{run_id}:chat.turn.2.tools.0.refund_charge"
    assert refund.inputs == {"customer": "cus_ada", "amount_cents": 4200}
    assert model.turns_asked() == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


REFUND_MODELS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4.1-mini"}


@pytest.mark.parametrize("api", APIS)
def test_a_finished_loop_replays_without_asking_the_model_again(
    api: str, model: WireModel, execute: Any
) -> None:
    run_id = start(api)
    first = execute(run_id)
    Run.objects.filter(pk=run_id).update(status="failed")
    transitions.run_resume(run_id=run_id, by="test", reason="replay", seen_version=None)
    again = execute(run_id, worker="worker-2")
    assert again.status == "succeeded" and again.result == first.result
    assert model.turns_asked() == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


@pytest.mark.parametrize(("api", "status"), [("anthropic", 529), ("openai", 429)])
def test_a_transient_error_is_retried_by_the_sdk_as_attempts_of_the_same_model_step(
    api: str, status: int, model: WireModel, execute: Any
) -> None:
    model.fail(status, times=2)  # the first turn's first two requests
    run_id = start(api)
    outcome = execute(run_id)
    assert outcome.status == "succeeded", outcome
    ledger = rows(run_id)
    assert list(ledger) == list(EXPECTED_STEPS)  # no extra step for the retries
    assert ledger["chat.turn.1"].result["attempts"] == 3
    assert outcome.result["usage"]["attempts"] == 6
    assert model.turns_asked() == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


@pytest.mark.parametrize("api", APIS)
def test_a_loop_past_its_limit_stops_as_budget_and_goes_on_once_raised(
    api: str, model: WireModel, execute: Any
) -> None:
    run_id = start(api, limits={"max_turns": 2})
    outcome = execute(run_id)
    run = Run.objects.get(pk=run_id)
    assert outcome.status == "needs_attention" and run.reason == "budget"
    assert run.blocked_step_id == "chat.turn.3"
    assert "2 turns of max_turns 2" in run.detail and "output tokens" in run.detail
    assert model.turns_asked() == {1: 1, 2: 1}
    transitions.run_admin_edit(
        run=run,
        by="test",
        reason="allow the loop two more turns",
        changes={"inputs": {**run.inputs, "limits": {"max_turns": 4}}},
        seen_version=run.version,
    )
    transitions.run_resume(run_id=run_id, by="test", reason="raised", seen_version=None)
    resumed = execute(run_id, worker="worker-2")
    assert resumed.status == "succeeded", resumed
    assert model.turns_asked() == {1: 1, 2: 1, 3: 1, 4: 1}
    effects_once()


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    ("api", "kill_at"),
    [
        ("anthropic", "fetch_invoice"),  # turn 1 answered, its tool results not yet
        ("openai", "fetch_invoice"),
        ("anthropic", "charge.after_effect"),  # the refund sent, its result not committed
        ("openai", "charge.after_effect"),
    ],
)
def test_a_worker_killed_mid_loop_resumes_asking_each_turn_once_and_sending_each_effect_once(
    api: str, kill_at: str, model: WireModel
) -> None:
    run_id = start(api)
    killed = subprocess.run(
        [sys.executable, str(MANAGE), "example_execute", run_id],
        env={
            **os.environ,
            **EQUIPMENT_ENV,
            **sdk_env(model),
            "DATABASE_URL": database_url(),
            "RUNLEDGER_KILL_AT": kill_at,
            "RUNLEDGER_LEASE_SECONDS": "0.5",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    before = rows(run_id)
    if kill_at == "fetch_invoice":
        assert before["chat.turn.1"].status == "succeeded"
        assert "chat.turn.2" not in before and ProviderCharge.objects.count() == 0
    else:
        assert before["chat.turn.2"].status == "succeeded"
        assert "started" in {r.status for r in before.values() if r.kind == "effect"}
    asked = model.turns_asked()
    assert set(asked.values()) == {1}, asked
    sent = set(ProviderCharge.objects.values_list("idempotency_key", flat=True))

    outcomes: list[Any] = []

    def resumed() -> bool:  # claimable once the dead worker's lease has lapsed
        outcomes.append(execute.run_execute(run_id=run_id, worker="w2", clock=timezone.now))
        return outcomes[-1] is not None

    assert wait_for(resumed, timeout=60, interval=0.1)
    outcome = outcomes[-1]
    assert outcome.status == "succeeded", outcome
    assert outcome.result["text"] == "Refunded and emailed every customer."
    assert model.turns_asked() == {1: 1, 2: 1, 3: 1, 4: 1}
    after = rows(run_id)
    # The chain, not seq: seq is the order of first writes, and a sibling killed before its
    # first write gets its seq on the resume (a loaded machine lets either sibling go first).
    assert chain(after) == list(EXPECTED_STEPS)
    for step_id, row in before.items():  # what had finished replayed untouched
        if row.status == "succeeded":
            assert (after[step_id].attempt, after[step_id].result) == (row.attempt, row.result)
    for step_id, row in before.items():  # an effect keeps its key across the crash
        assert after[step_id].effect_key == row.effect_key, step_id
    # The refund the provider had taken was settled by its lookup, not sent again; a started
    # sibling the provider never saw was sent once, under its kept key.
    settled = [r for r in after.values() if r.effect_key in sent]
    assert len(settled) == len(sent) and all(r.attempt == 1 for r in settled)
    effects_once()


@pytest.mark.slow
@pytest.mark.skipif("connection.vendor != 'postgresql'")
@pytest.mark.parametrize(
    ("api", "kill_at"), [("anthropic", "fetch_invoice"), ("openai", "charge.after_effect")]
)
def test_a_celery_worker_killed_mid_loop_is_recovered_by_the_sweep(
    api: str, kill_at: str, model: WireModel, tmp_path: Path
) -> None:
    """The whole `celery -A runs worker` (parent and pool child) dies at the point; a second
    worker and beat's sweep recover the run, asking each turn once and refunding each once."""
    env = {"RUNLEDGER_AGENT_MODULES": "ledger.examples.agents", **sdk_env(model)}
    with Cluster(tmp_path, lease_seconds=2, sweep_seconds=0.5, env=env) as cluster:
        run_id = start(api)
        victim = cluster.worker(
            "victim", env={"RUNLEDGER_KILL_AT": kill_at, "RUNLEDGER_KILL_SCOPE": "group"}
        )
        cluster.send(start_run, run_id)
        assert wait_for(lambda: victim.poll() is not None, timeout=60), cluster.log("victim")
        assert Run.objects.get(pk=run_id).status == "running"
        cluster.worker("rescuer")
        cluster.beat()
        assert wait_for(lambda: settled(run_id), timeout=90), cluster.log("rescuer")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.executions, run.resume_count) == ("succeeded", 2, 1), run.detail
    assert model.turns_asked() == {1: 1, 2: 1, 3: 1, 4: 1}
    assert chain(rows(run_id)) == list(EXPECTED_STEPS)
    effects_once()
    connection.close()


def test_tool_schemas_come_from_signatures_and_are_the_runs_tool_schema_hash() -> None:
    refund_loop = registry.get_agent("refund_loop")
    assert refund_loop is not None
    charge = next(t for t in refund_loop.tools if t.name == "refund_charge")
    assert charge.parameters() == {
        "type": "object",
        "properties": {"customer": {"type": "string"}, "amount_cents": {"type": "integer"}},
        "required": ["customer", "amount_cents"],
    }
    run = transitions.run_start(agent="refund_loop", inputs={"invoice_ids": []})
    assert run.tool_schema_hash == ""  # the worker that first executes it records its own
    token = transitions.lease_claim(run_id=run.run_id, owner="worker")
    assert token is not None
    transitions.run_stamp_plan(run_id=run.run_id, token=token)
    run.refresh_from_db()
    assert run.tool_schema_hash == refund_loop.tool_schema_hash
