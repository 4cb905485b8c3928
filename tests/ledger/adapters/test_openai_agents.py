"""The OpenAI Agents SDK adapter (``ledger.adapters.openai_agents``) with a fake SDK ``Model``
(``harness.openai_agents_agent``), on the real ledger: every test asserts the ledger, the fake
model's asks and the simulators' tables after the act."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

pytest.importorskip("agents")

from harness import openai_agents_agent as example  # noqa: E402 - registers oa_refunds
from harness.cluster import database_url, wait_for  # noqa: E402
from ledger import transitions  # noqa: E402
from ledger.adapters import openai_agents  # noqa: E402
from ledger.examples.models import Notification, ProviderCharge  # noqa: E402
from ledger.models import Run, Step  # noqa: E402
from ledger.processes import execute as processes_execute  # noqa: E402
from runs.cli import EQUIPMENT_ENV  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)
assert connection  # the skipif conditions below read it

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"
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


def rows(run_id: str) -> dict[str, Step]:
    return {s.step_id: s for s in Step.objects.filter(run_id=run_id).order_by("seq")}


def chain(ledger: dict[str, Step]) -> list[str]:
    linked = {r.next_step_id for r in ledger.values()}
    (first,) = [s for s in ledger if s not in linked]
    path = [first]
    while (following := ledger[path[-1]].next_step_id) is not None and len(path) <= len(ledger):
        path.append(following)
    return path


def effects_once() -> None:
    charges = Counter(ProviderCharge.objects.values_list("idempotency_key", flat=True))
    assert len(charges) == 2 and set(charges.values()) == {1}, charges
    assert sorted(ProviderCharge.objects.values_list("amount_cents", flat=True)) == [-4200, -990]
    assert Notification.objects.count() == 1


def asked(path: Path) -> dict[int, int]:
    return dict(Counter(int(x) for x in path.read_text().split())) if path.exists() else {}


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
