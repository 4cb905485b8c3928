"""``ctx.ask`` (issue 33, item 3) as a worker executes it on the test database: the run stops
for a person (needs_attention, reason ``question``), the answer is validated, audited and
recorded, and the run resumes with it at no resume budget; a timeout returns the default."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from harness.unannounced import start_unannounced
from ledger import selectors, transitions
from ledger.errors import InvalidInput, NotAllowed
from ledger.models import AuditEvent, MailboxEvent, Run, Step
from ledger.processes import sweep
from ledger.processes.execute import run_execute
from tests.support import wait_agents

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


def execute(run_id: str, clock: Any) -> Any:
    return run_execute(run_id=run_id, worker="w", clock=clock, heartbeat=False, sleep=clock.sleep)


def ask(clock: Any, tmp_path: Any, suffix: str = "", **inputs: Any) -> str:
    clock.now = timezone.now()  # an answer stamps its wake-up with the real time
    marks = str(tmp_path / "marks")
    return start_unannounced(agent=f"asker{suffix}", inputs={"marks": marks, **inputs}).run_id


@pytest.mark.parametrize("suffix", ["", "-async"])
def test_a_question_stops_the_run_and_its_answer_resumes_it(suffix, clock, tmp_path) -> None:
    run_id = ask(clock, tmp_path, suffix)

    outcome = execute(run_id, clock)

    assert (outcome.status, outcome.reason, outcome.step_id) == (
        "needs_attention",
        "question",
        "ask",
    )
    run = Run.objects.get(pk=run_id)
    question = selectors.question_of(run=run)
    assert question is not None and question.question == "Refund inv_1?"
    assert question.schema == wait_agents.DECISION and question.role == "operator"

    with pytest.raises(InvalidInput, match="approve"):
        transitions.question_answer(run_id=run_id, answer={"note": "x"}, by="alice")
    assert not MailboxEvent.objects.exists() and not AuditEvent.objects.exists()
    transitions.question_answer(
        run_id=run_id, answer={"approve": True, "note": "<b>ok</b>"}, by="alice"
    )
    with pytest.raises(NotAllowed):  # a second answer to the same question
        transitions.question_answer(run_id=run_id, answer={"approve": False}, by="bob")
    clock.advance(1)

    outcome = execute(run_id, clock)

    assert outcome.status == "succeeded"
    assert outcome.result == {"answer": {"approve": True, "note": "<b>ok</b>"}}
    assert Run.objects.get(pk=run_id).resume_count == 0
    audit = AuditEvent.objects.get()
    assert (audit.actor, audit.action, audit.step_id) == ("alice", "question_answer", "ask")
    assert Step.objects.get(run_id=run_id, step_id="ask").result["payload"]["approve"] is True


def test_an_unanswered_question_times_out_to_the_default(clock, tmp_path) -> None:
    run_id = ask(clock, tmp_path, timeout=3600)
    execute(run_id, clock)
    assert Run.objects.get(pk=run_id).wake_at == clock() + timedelta(seconds=3600)
    assert sweep.runs_sweep(clock=clock) == []  # not yet

    clock.advance(3600)
    assert sweep.runs_sweep(clock=clock) == [run_id]
    outcome = execute(run_id, clock)

    assert outcome.result == {"answer": "no answer"}
    assert Step.objects.get(run_id=run_id, step_id="ask").result["timed_out"] is True
    with pytest.raises(NotAllowed):
        transitions.question_answer(run_id=run_id, answer={"approve": True}, by="late")


def test_an_application_cannot_send_an_answer_as_an_event(clock, tmp_path) -> None:
    run_id = ask(clock, tmp_path)
    execute(run_id, clock)
    from ledger import api

    with pytest.raises(InvalidInput):
        api.send_event(run_id, "answer:ask", {"approve": True}, event_id="forged")
    assert not MailboxEvent.objects.exists()


def test_the_person_is_told_once_though_the_run_stops_on_its_question_twice(
    clock, tmp_path, settings
) -> None:
    from ledger.processes import delivery
    from tests.support.receivers import Receiver

    receiver = Receiver()
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{receiver.port}/hook"
    try:
        run_id = ask(clock, tmp_path)
        assert execute(run_id, clock).reason == "question"
        delivery.deliver_due(clock=clock)
        # Resumed by hand before anyone answered: the replay stops on the same question again.
        transitions.run_resume(
            run_id=run_id, by="op", reason="nudge", seen_version=None, anyway=True, stops_again=""
        )
        clock.advance(1)
        assert execute(run_id, clock).reason == "question"
        assert Run.objects.get(pk=run_id).status_changed_at == clock()  # a second stop
        clock.advance(1)
        delivery.deliver_due(clock=clock)
        delivery.deliver_due(clock=clock)

        told = [body for _key, body in receiver.requests if body.get("run_id") == run_id]
        assert [(b["event"], b["reason"]) for b in told] == [("needs_attention", "question")]

        # Its answer, then another run's question: each question is told once, its own.
        transitions.question_answer(run_id=run_id, answer={"approve": True}, by="alice")
        other = ask(clock, tmp_path, invoice="inv_2")
        execute(other, clock)
        delivery.deliver_due(clock=clock)
        assert sorted(body["run_id"] for _key, body in receiver.requests) == sorted([run_id, other])
    finally:
        receiver.stop()
