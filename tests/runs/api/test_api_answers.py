"""Answering a run's question (``ctx.ask``) through the HTTP API: a person's token whose
person holds the question's role answers; a service's token, a person without the role, a
second answer and an answer that does not fit the schema are problems that write nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger.models import AuditEvent, Run
from ledger.processes.execute import run_execute
from tests.conftest import FakeClock
from tests.support import wait_agents  # noqa: F401 - registers the asker
from tests.support.api_rows import ledger_rows

pytestmark = pytest.mark.django_db(transaction=True)


def asked(tmp_path: Path, role: str = "approver") -> str:
    run_id = start_unannounced(
        agent="asker", inputs={"marks": str(tmp_path / "marks"), "role": role}
    ).run_id
    run_execute(run_id=run_id, worker="w", heartbeat=False)
    assert Run.objects.get(pk=run_id).reason == "question"
    return run_id


def test_a_person_with_the_role_answers_and_the_run_goes_on(caller: Any, tmp_path: Path) -> None:
    run_id = asked(tmp_path)
    url = f"/api/v1/runs/{run_id}/answer"
    before = ledger_rows()

    assert caller("operator").post(url, {"answer": {"approve": True}}).status_code == 403
    assert (
        caller("operator", user="olive").post(url, {"answer": {"approve": True}}).status_code == 403
    )
    bob = caller("approver", user="bob")
    bad = bob.post(url, {"answer": {"approve": "yes"}})
    assert bad.status_code == 422 and "approve" in bad.json()["detail"]
    assert ledger_rows() == before

    done = bob.post(url, {"answer": {"approve": True, "note": "ok"}})

    assert done.status_code == 200, done.content
    assert done.json()["status"] == "queued"
    again = bob.post(url, {"answer": {"approve": False}})
    assert again.status_code == 409
    clock = FakeClock(now=timezone.now())
    clock.advance(1)
    outcome = run_execute(run_id=run_id, worker="w", heartbeat=False, clock=clock)
    assert outcome.result == {"answer": {"approve": True, "note": "ok"}}
    assert AuditEvent.objects.get(action="question_answer").actor == "bob"
