"""The Claude Agent SDK adapter with the SDK's REAL bundled CLI, pointed at a loopback Messages
API (``tests/support/llm_wire_claude.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from ledger import transitions
from ledger.adapters import claude_agent_sdk as adapter
from ledger.examples.models import Notification, ProviderCharge
from ledger.models import ClaudeSessionEntry, Step
from tests.support import claude_agents  # noqa: F401
from tests.support.llm_wire_claude import ClaudeWire

pytestmark = pytest.mark.django_db(transaction=True)
PROMPT = "Refund invoices inv_1001 and inv_1003."


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClaudeWire]:
    with ClaudeWire() as served:
        for name, value in served.env.items():
            monkeypatch.setenv(name, value)
        yield served


def test_a_session_runs_through_the_ledger(model: ClaudeWire, execute: Any) -> None:
    run = transitions.run_start(agent="claude_refund", inputs={"prompt": PROMPT})
    outcome = execute(run.run_id)
    assert outcome.status == "succeeded", outcome
    steps = {s.step_id: (s.kind, s.status) for s in Step.objects.filter(run=run.run_id)}
    print(steps, outcome.result)
    assert ProviderCharge.objects.count() == 1 and Notification.objects.count() == 1
    assert ClaudeSessionEntry.objects.filter(run=run.run_id).exists()
    print(adapter.transcript(run.run_id))
