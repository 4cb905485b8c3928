"""A fork in Chromium (issue 23, item 3): the form lists the effects the fork would send again
(tool, old key, old outcome), refuses to start without the typed confirmation, and starts the
fork once it is typed."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from ledger.models import AuditEvent, Run, Step
from tests.support.dashboard_runs import PASSWORD, succeeded_run, user_in

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""


def test_a_fork_lists_the_effects_it_sends_again_and_needs_the_confirmation(
    page: Page, live_server, execute
) -> None:
    run = succeeded_run(execute)
    keys = dict(Step.objects.filter(run=run).values_list("step_id", "effect_key"))
    user_in("operator", "olive")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "olive")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()

    page.goto(f"{live_server.url}/runs/{run.run_id}/fork/?step=decide")
    listed = page.locator("#sent-again")
    expect(listed).to_contain_text("3 effects will be sent again")
    rows = listed.locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("refund_charge")
    expect(rows.nth(0)).to_contain_text(keys["refund"])
    expect(rows.nth(0)).to_contain_text("sent (succeeded)")
    expect(rows.nth(2)).to_contain_text("notify_team")

    page.fill("textarea[name=reason]", "redo after the fix")
    page.fill("#id_confirm", "yes")
    page.get_by_role("button", name="Start the fork").click()
    expect(page.locator(".field-error")).to_contain_text('Type "send 3 again" to confirm')
    assert Run.objects.count() == 1 and not AuditEvent.objects.exists()

    page.fill("#id_confirm", "send 3 again")
    page.get_by_role("button", name="Start the fork").click()
    expect(page).to_have_url(re.compile(r"/runs/run_[0-9a-f]+/$"))
    fork = Run.objects.get(parent=run)
    assert page.url.endswith(f"/runs/{fork.run_id}/")
    audit = AuditEvent.objects.get(run_id=fork.run_id, action="run_fork")
    assert [e["step_id"] for e in audit.after["sent_again"]] == [
        "refund",
        "email_customer",
        "notify",
    ]
