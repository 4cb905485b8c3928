"""The transcript beside the ledger, in a real browser: runs of the tool-use loops on the real
``anthropic`` and ``openai`` SDKs (against the loopback provider), then their run pages in
Chromium — the conversation next to the step chain, linked both ways, a stale turn marked."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from ledger import transitions
from ledger.examples import agents
from ledger.models import Run, Step
from tests.support.dashboard_runs import PASSWORD, restore_roles, rewind, user_in
from tests.support.llm_wire import WireModel

pytest.importorskip("anthropic")
pytest.importorskip("openai")

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: A temporary folder, or docs/screenshots under `make screenshots` (the README shows it).
SCREENSHOTS = Path(os.environ.get("RUNLEDGER_SCREENSHOTS") or tempfile.mkdtemp(prefix="shots-"))


@pytest.fixture(autouse=True)
def _clean(clock: Any, settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    rewind(clock)


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireModel]:
    with WireModel() as served:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", served.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{served.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield served


def loop_run(execute: Any, api: str, **inputs: Any) -> str:
    run = transitions.run_start(
        agent="refund_loop", inputs={"invoice_ids": ["inv_1001", "inv_1003"], "api": api, **inputs}
    )
    execute(run.run_id)
    return run.run_id


def sign_in(page: Page, base: str, username: str) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()


def by_id(page: Page, element_id: str) -> Any:
    return page.locator(f'[id="{element_id}"]')


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_the_run_page_shows_the_transcript_beside_the_ledger_linked_both_ways(
    api: str, page: Page, live_server: Any, execute: Any, model: WireModel
) -> None:
    run_id = loop_run(execute, api)
    fetch = Step.objects.get(run_id=run_id, step_id="chat.turn.1.tools.0.fetch_invoice")
    user_in("viewer", name="vera")
    sign_in(page, live_server.url, "vera")
    page.goto(f"{live_server.url}/runs/{run_id}/")

    transcript = page.locator("#transcript")
    expect(transcript).to_be_visible()
    expect(transcript).to_contain_text("You settle refund requests")  # system
    expect(transcript).to_contain_text("Please refund invoices inv_1001, inv_1003.")  # user
    expect(transcript).to_contain_text("assistant · turn 4")
    expect(transcript).to_contain_text("Refunded and emailed every customer.")
    expect(transcript).to_contain_text(api)
    call = by_id(page, "t-chat.turn.2.tools.1.refund_charge")
    expect(call).to_contain_text("refund_charge")
    expect(call).to_contain_text("succeeded")
    expect(call).to_contain_text('"charge_id"')  # the tool result the model was given
    expect(page.locator("#step-table")).to_be_visible()  # beside it: the step chain
    if api == "anthropic":
        page.screenshot(path=str(SCREENSHOTS / "transcript.png"), full_page=False)

    # From the conversation to the ledger row ...
    by_id(page, "t-chat.turn.1.tools.0.fetch_invoice").get_by_role(
        "link", name="chat.turn.1.tools.0.fetch_invoice"
    ).click()
    expect(page).to_have_url(re.compile(rf"step=chat.turn.1.tools.0.fetch_invoice#step-{fetch.pk}"))
    row = page.locator(f"#step-{fetch.pk}")
    expect(row).to_be_in_viewport()
    # ... and from the row back to the turn that asked for it.
    row.get_by_role("link", name="turn in the transcript").click()
    expect(page).to_have_url(re.compile(r"#t-chat\.turn\.1$"))
    expect(by_id(page, "t-chat.turn.1")).to_be_in_viewport()


def test_a_stale_turn_is_marked_in_the_transcript(
    page: Page,
    live_server: Any,
    execute: Any,
    model: WireModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = loop_run(execute, "anthropic", limits={"max_turns": 2})
    assert Run.objects.get(pk=run_id).reason == "budget"
    monkeypatch.setattr(agents, "REFUND_LOOP_SYSTEM", "You settle refunds, politely.")
    transitions.run_resume(
        run_id=run_id, by="test", reason="deploy", seen_version=None, max_resumes=9, anyway=True
    )
    execute(run_id, worker="worker-2")
    run = Run.objects.get(pk=run_id)
    assert (run.reason, run.blocked_step_id) == ("stale", "chat.turn.1")
    user_in("viewer", name="vera")
    sign_in(page, live_server.url, "vera")
    page.goto(f"{live_server.url}/runs/{run_id}/")
    turn = by_id(page, "t-chat.turn.1")
    expect(turn).to_have_class(re.compile("is-stale"))
    expect(turn).to_contain_text("stale")
    expect(by_id(page, "t-chat.turn.2")).not_to_have_class(re.compile("is-stale"))
