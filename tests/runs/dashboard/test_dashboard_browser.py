"""The dashboard in a real browser: Playwright drives Debian's Chromium against a live server.

The runs on the pages are built by the real engine (crash points, a changed prompt), in the
test's thread; the live server reads them from the same database.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from ledger import registry, transitions
from ledger.models import Step
from tests.support.dashboard_runs import (
    PASSWORD,
    agent_gone_run,
    budget_run,
    expired_lease_run,
    reconciliation_run,
    stale_run,
    succeeded_run,
    survey_run,
    user_in,
    wait_for_held_polls,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
]

#: Where the screenshots go: a temporary folder, or docs/screenshots (the README shows them)
#: under `make screenshots`, so that running the suite leaves the tree clean.
SCREENSHOTS = Path(os.environ.get("RUNLEDGER_SCREENSHOTS") or tempfile.mkdtemp(prefix="shots-"))


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""
    registry.unregister_agent("legacy-agent")


def sign_in(page: Page, base: str, username: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 860})
    page.goto(f"{base}/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()


def test_an_operator_triages_a_stale_run_in_the_browser(
    page: Page, live_server, execute, crash_at, monkeypatch
) -> None:
    reconciliation_run(execute, crash_at)
    budget_run(execute, crash_at)
    expired_lease_run(execute, crash_at)
    succeeded_run(execute)
    survey_run(execute, records=12)
    agent_gone_run(execute, crash_at)
    stale = stale_run(execute, crash_at, monkeypatch)
    transitions.run_start(agent="survey", inputs={"records": 30})  # queued
    user_in("operator", name="olive")

    sign_in(page, live_server.url, "olive")
    counts = page.locator("#status-counts")
    expect(counts.locator(".tile.st-needs_attention .n")).to_have_text("4")
    expect(counts.locator(".tile.st-lease_expired .n")).to_have_text("1")
    expect(page.locator("#run-table tbody tr")).to_have_count(8)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "runs-list.png"), full_page=True)

    # Filter: htmx swaps the table and pushes the URL.
    page.select_option("select[name=reason]", "stale")
    page.click("form.filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"reason=stale"))
    rows = page.locator("#run-table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(stale.run_id)

    # Open the blocked run.
    rows.first.locator(f'a[href="/runs/{stale.run_id}/"]').click()  # the title links the run
    expect(page).to_have_url(re.compile(f"/runs/{stale.run_id}/"))
    header = page.locator("#run-header")
    expect(header).to_contain_text("needs_attention")
    expect(header).to_contain_text("stale")
    expect(header.locator(".blocked a")).to_have_text("decide")

    # The hash comparison loads by itself: the stale step, its diff, its downstream.
    decide = Step.objects.get(run=stale, step_id="decide")
    stale_body = page.locator(f"#step-{decide.pk}")
    expect(stale_body).to_have_class(re.compile("is-stale"))
    expect(stale_body.locator("code.hash-bad")).to_be_visible()
    expect(stale_body.locator(".d-del").first).to_contain_text(
        "Refund it if the reason is ours? Answer approve"
    )
    expect(stale_body.locator(".d-add").first).to_contain_text("good standing")
    expect(page.locator("tbody.is-downstream")).to_have_count(2)

    # Expand a result on demand.
    fetch = Step.objects.get(run=stale, step_id="fetch_invoice")
    cell = page.locator(f"#result-{fetch.pk}")
    cell.get_by_text("expand").click()
    expect(cell.locator("pre.json")).to_contain_text('"customer": "cus_ada"')
    cell.get_by_text("collapse").click()
    expect(cell.locator("pre")).to_have_count(0)

    # Preview the resume.
    page.get_by_role("link", name="Preview resume").click()
    preview = page.locator("#preview")
    expect(preview).to_contain_text("nothing was executed or written")
    expect(preview.locator(".verdict")).to_contain_text("1 stale step, 2 downstream")
    # email_customer's tool has a lookup: the resume asks it (not "settle it first").
    expect(preview.locator("#preview-asked")).to_have_text("The resume asks the lookup")
    expect(preview).not_to_contain_text("Settle first")
    expect(preview.locator(".steplist a", has_text="email_customer")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "run-page.png"), full_page=True)


def test_the_list_refreshes_itself_and_pauses_while_the_tab_is_hidden(
    page: Page, live_server, settings, execute
) -> None:
    settings.RUNLEDGER_LIST_REFRESH_SECONDS = 1
    first = succeeded_run(execute)
    user_in("viewer", name="vic")
    sign_in(page, live_server.url, "vic")
    expect(page.locator("#run-table")).to_contain_text(first.run_id)

    moved = transitions.run_start(agent="survey", inputs={"records": 3})
    expect(page.locator("#run-table")).to_contain_text(moved.run_id, timeout=60_000)

    page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'));"
    )
    wait_for_held_polls(page, "#run-table", 1)  # the timer ticked since the tab was hidden
    # Listen from here: a poll already on its way when the tab was hidden is not one it sent.
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if r.headers.get("hx-request") else None)
    hidden_run = transitions.run_start(agent="survey", inputs={"records": 4})
    # Three more polls came due while hidden and were held back (dashboard.js counts them).
    wait_for_held_polls(page, "#run-table", 3)
    assert polls == []
    expect(page.locator("#run-table")).not_to_contain_text(hidden_run.run_id)
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'));"
    )
    expect(page.locator("#run-table")).to_contain_text(hidden_run.run_id, timeout=60_000)


def test_a_viewer_meets_refusals_missing_runs_and_bad_filters_as_pages(
    page: Page, live_server, execute, crash_at
) -> None:
    gone = agent_gone_run(execute, crash_at)
    user_in("viewer", name="val")
    sign_in(page, live_server.url, "val")

    response = page.goto(f"{live_server.url}/runs/{gone.run_id}/ledger.json")
    assert response is not None and response.status == 403
    expect(page.locator("h1")).to_have_text("Not allowed")

    response = page.goto(f"{live_server.url}/runs/run_does_not_exist/")
    assert response is not None and response.status == 404
    expect(page.locator("main")).to_contain_text("run_does_not_exist")

    response = page.goto(f"{live_server.url}/?age=soon&status=needs_attention")
    assert response is not None and response.status == 200
    expect(page.locator(".message.warn")).to_contain_text("Ignored age")
    expect(page.locator("#run-table")).to_contain_text(gone.run_id)

    page.goto(f"{live_server.url}/runs/{gone.run_id}/")
    expect(page.locator("#run-header")).to_contain_text("code not found here")
    expect(page.locator("tbody.step")).to_have_count(1)  # its ledger: the read it recorded
    expect(page.locator(".compare-state")).to_contain_text("not available here")
    page.get_by_role("link", name="Preview resume").click()
    expect(page.locator("#preview")).to_contain_text("Preview unavailable")
    expect(page.locator("#preview")).to_contain_text("'legacy-agent' is not available here")
