"""PydanticAI agents on the ledger (``ledger.adapters.pydantic_ai``), offline: the example
refund desk (``ledger.examples.pydantic_agents``) on PydanticAI's ``FunctionModel``.

Every test asserts the ledger after the act and the simulators' tables (how often each effect
happened); the model's own calls are counted by a fault-point hook inside the model function.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from harness import faults  # noqa: E402
from ledger import transitions  # noqa: E402
from ledger.examples import pydantic_agents  # noqa: E402
from ledger.examples.models import Notification, ProviderCharge  # noqa: E402
from ledger.models import Run, Step  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

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


@pytest.fixture
def asked() -> Iterator[Counter[int]]:
    """How often the scripted model was really asked, by turn (a hook at its fault point)."""
    counts: Counter[int] = Counter()
    faults.set_hook("pai.model", lambda: counts.update([len(counts) + 1]))
    yield counts
    faults.clear_hooks()


def start() -> str:
    return transitions.run_start(agent="refund_pydantic_ai", inputs={"invoice_ids": INVOICES}).run_id


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
