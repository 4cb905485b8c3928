"""Approving with the evidence, as an approver sees it in real Chromium (issue 23, item 4): a
proposed result whose amount contradicts the step's inputs is flagged beside them, the Approve
button does nothing until the approver ticks "I checked", and the queue sends such a proposal
to its review page instead of offering an inline Approve."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from ledger import transitions
from ledger.models import Settlement, Step
from tests.support.dashboard_runs import (
    PASSWORD,
    renewal_run,
    user_in,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

#: docs/screenshots under `make screenshots`; a temporary folder otherwise.
SCREENSHOTS = Path(os.environ.get("RUNLEDGER_SCREENSHOTS") or tempfile.mkdtemp(prefix="shots-"))


@pytest.fixture(autouse=True)
def _clean(dashboard_ready, settings) -> Iterator[None]:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True
    yield


def sign_in(page: Page, base: str, username: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{base}/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()


def test_an_approver_must_acknowledge_a_result_that_contradicts_the_inputs(
    page: Page, live_server, execute, crash_at
) -> None:
    run = renewal_run(execute, crash_at)  # cus_hopper's renewal: 24,900 cents
    step = Step.objects.get(run=run, step_id="charge")
    transitions.settlement_propose(
        step=step,
        outcome="happened",
        result={"gateway_ref": "gw_77", "amount_cents": 900},
        reason="the statement shows a charge",
        by=user_in("operator", "olive"),
        seen_version=step.version,
    )
    user_in("approver", "amy")
    sign_in(page, live_server.url, "amy")

    # The queue shows the proposed result and the flag, and no inline Approve for it.
    page.goto(f"{live_server.url}/settlements/")
    row = page.locator(f"#queue-{step.pk}")
    expect(row.locator("pre.queue-result")).to_contain_text('"amount_cents": 900')
    expect(row.get_by_role("alert")).to_contain_text(
        "amount_cents is 900 here, but 24900 in the step's inputs"
    )
    expect(row.get_by_role("button", name="Approve", exact=False)).to_have_count(0)
    row.get_by_role("link", name="review it with the evidence to approve").click()

    # The settle page: the result beside the inputs, the flag, the box to tick.
    beside = page.locator("#proposal-evidence")
    expect(beside.locator("pre.proposed-result")).to_contain_text('"amount_cents": 900')
    expect(beside).to_contain_text('"amount_cents": 24900')
    flag = page.locator("#evidence-flag")
    expect(flag).to_be_visible()
    expect(flag).to_contain_text("amount_cents is 900 here, but 24900 in the step's inputs")
    page.locator("#proposal").screenshot(path=str(SCREENSHOTS / "settle-evidence.png"))
    approve = page.get_by_role("button", name="Approve and resume the run")
    approve.click()
    # The browser holds the form until the box is ticked: nothing was sent, nothing changed.
    box = page.get_by_role("checkbox", name="I checked", exact=False)
    assert box.evaluate("el => el.matches(':invalid')")
    expect(page).to_have_url(
        f"{live_server.url}/runs/{run.run_id}/steps/{step.pk}/settle/#proposal"
    )
    assert Settlement.objects.get().status == "proposed"
    assert Step.objects.get(pk=step.pk).status == "started"

    box.check()
    approve.click()
    expect(page).to_have_url(f"{live_server.url}/runs/{run.run_id}/")
    expect(page.locator(".messages")).to_contain_text("Approved olive")
    assert Settlement.objects.get().status == "applied"
    assert Step.objects.get(pk=step.pk).result == {"gateway_ref": "gw_77", "amount_cents": 900}
