"""A person's answer to ``ctx.ask`` in real Chromium (issue 33): the run page shows the
question (escaped), the stream the agent emitted and its mailbox; an operator answers through
the form made from the question's JSON Schema, a viewer sees no form and is refused, and the
run resumes with the answer (the ledger's rows asserted after). Screenshots of the page at 1280
and 390 px for the docs (``make screenshots``)."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from harness.unannounced import start_unannounced
from ledger import api
from ledger.models import AuditEvent, MailboxEvent, Run, Step, StreamEvent
from ledger.processes.execute import run_execute
from tests.support import wait_agents  # noqa: F401 - registers the concierge
from tests.support.dashboard_runs import PASSWORD, user_in

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(os.environ.get("RUNLEDGER_SCREENSHOTS") or tempfile.mkdtemp(prefix="shots-"))


def sign_in(page: Page, base: str, username: str, width: int = 1280) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()


def sign_out(page: Page) -> None:
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/"))


def asking_run() -> str:
    """A run that emitted, took the customer's reply from its mailbox and asks an operator."""
    run_id = start_unannounced(
        agent="concierge",
        inputs={"ticket": "T-1042", "invoice": "inv_7", "customer": "<b>Ada</b>"},
    ).run_id
    api.send_event(run_id, "customer_reply", {"text": "Please refund <i>me</i>"}, event_id="r1")
    assert run_execute(run_id=run_id, worker="w", heartbeat=False).reason == "question"
    return run_id


def test_an_operator_answers_in_chromium_a_viewer_cannot_and_the_run_goes_on(
    page: Page, live_server: Any, dashboard_ready: Any
) -> None:
    run_id = asking_run()
    user_in("viewer", name="vera")
    user_in("operator", name="olive")
    base = live_server.url

    sign_in(page, base, "vera")
    page.goto(f"{base}/runs/{run_id}/")
    question = page.locator("#run-question")
    expect(question.locator("h2")).to_have_text("A question for an operator")
    expect(question).to_contain_text("Refund inv_7 for <b>Ada</b>?")  # escaped: shown as text
    expect(question).to_contain_text("Only an operator (or a stronger role) may answer it")
    expect(question.locator("form")).to_have_count(0)
    refused = page.request.post(f"{base}/runs/{run_id}/answer/", form={"field_approve": "on"})
    assert refused.status == 403
    assert Run.objects.get(pk=run_id).status == "needs_attention"
    assert not MailboxEvent.objects.filter(name__startswith="answer:").exists()
    sign_out(page)

    sign_in(page, base, "olive")
    page.goto(f"{base}/runs/{run_id}/")
    expect(page.locator("#run-stream")).to_contain_text("asking a person")
    expect(page.locator("#run-mailbox")).to_contain_text("customer_reply")
    expect(page.locator("#run-mailbox")).to_contain_text("Please refund <i>me</i>")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SCREENSHOTS / f"run-question-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})
    labels = question.locator("form label").all_inner_texts()
    assert labels[:2] == ["Approve the refund", "note"]  # what must be answered comes first
    page.check("#field-approve")
    page.fill("#field-note", "refund within policy")
    page.fill("#answer-reason", "checked the invoice")
    page.get_by_role("button", name="Answer").click()
    expect(page.locator("#run-question")).to_have_count(0)
    expect(page.locator("#run-acts")).to_contain_text("answered its question")

    answer = {"approve": True, "note": "refund within policy"}
    assert MailboxEvent.objects.get(name="answer:ask").payload == answer
    audit = AuditEvent.objects.get(action="question_answer")
    assert (audit.actor, audit.reason) == ("olive", "checked the invoice")
    assert Run.objects.get(pk=run_id).status == "queued"

    outcome = run_execute(run_id=run_id, worker="w", heartbeat=False)  # the worker's resume

    assert (outcome.status, outcome.result) == (
        "succeeded",
        {"reply": {"text": "Please refund <i>me</i>"}, "answer": answer},
    )
    assert Step.objects.get(run_id=run_id, step_id="ask").result["payload"] == answer
    assert [e.data["stage"] for e in StreamEvent.objects.filter(run_id=run_id).order_by("id")] == [
        "reading the ticket",
        "asking a person",
        "done",
    ]
    assert Run.objects.get(pk=run_id).resume_count == 0
    page.goto(f"{base}/runs/{run_id}/")
    expect(page.locator("#run-header .title-row")).to_contain_text("succeeded")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SCREENSHOTS / f"run-mailbox-stream-{width}.png"), full_page=True)
