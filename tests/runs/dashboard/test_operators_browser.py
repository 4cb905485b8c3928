"""Operators at work in Chromium (issue 10): runs named by their titles in the list and the
queue, a clean run started from a divergence, a live step count that follows the run to its
end, and — with a real Celery worker — the webhook and the email arriving once for a run that
needs a person, once for a waiting proposal, and once more as a reminder after the set age."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone
from playwright.sync_api import Page, expect

from harness.cluster import Cluster, wait_for
from ledger import transitions
from ledger.models import DeliveryStatus, Notification, Run
from ledger.processes import execute as execution
from runs.operations import tasks
from tests.support import plan_change
from tests.support.dashboard_runs import (
    PASSWORD,
    expired_lease_run,
    renewal_run,
    start,
    user_in,
)
from tests.support.receivers import Mailbox, Receiver, free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready, settings) -> Iterator[None]:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True
    settings.RUNLEDGER_LIST_REFRESH_SECONDS = 1

    plan_change.register()
    yield
    plan_change.unregister()


def sign_in(page: Page, base: str, username: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()


def test_titles_a_clean_run_from_a_divergence_and_a_live_step_count(
    page: Page, live_server, execute, crash_at, clock
) -> None:
    hopper = renewal_run(execute, crash_at, customer="cus_hopper")
    renewal_run(execute, crash_at, point="gateway.before_effect", customer="cus_knuth")
    diverged = start(plan_change.NAME, {"who": "ada"}, clock)
    assert execute(diverged.run_id).status == "failed"
    plan_change.deploy()
    transitions.run_resume(  # resumed anyway: it diverges
        run_id=diverged.run_id, by="olive", reason="try", seen_version=None, clock=clock,
        anyway=True,
    )  # fmt: skip
    assert execute(diverged.run_id).reason == "divergence"
    running = expired_lease_run(execute, crash_at)
    user_in("operator", "olive")
    base = live_server.url
    sign_in(page, base, "olive")
    table = page.locator("#run-table")
    expect(table).to_contain_text("Renew the subscription of cus_hopper")
    expect(table).to_contain_text("Renew the subscription of cus_knuth")
    page.get_by_role("link", name="Settle", exact=True).first.click()
    queue = page.locator("table.queue")
    expect(queue).to_contain_text("Renew the subscription of cus_hopper")
    expect(queue).to_contain_text("Renew the subscription of cus_knuth")
    page.goto(f"{base}/?q=cus_hopper")
    expect(page.locator("#run-table")).to_contain_text(hopper.run_id)
    expect(page.locator("#run-table")).not_to_contain_text("cus_knuth")

    page.goto(f"{base}/runs/{diverged.run_id}/")
    page.get_by_role("link", name="Start a clean run…").first.click()
    page.fill("textarea[name=reason]", "the plan changed")
    page.get_by_role("button", name="Start the clean run").click()
    new = Run.objects.get(parent_id=diverged.run_id, parent_kind="clean")
    expect(page).to_have_url(re.compile(f"/runs/{new.run_id}/$"))
    expect(page.locator("#run-header")).to_contain_text(f"clean of {diverged.run_id}")
    assert Run.objects.get(pk=diverged.run_id).status == "cancelled"

    page.goto(f"{base}/runs/{running.run_id}/")
    live = page.locator("#run-live")
    expect(live).to_contain_text("steps recorded")
    clock.advance(3600)
    assert execution.run_execute(run_id=running.run_id, worker="w2", clock=clock, heartbeat=False)
    expect(page.locator("#run-header .badge.big").first).to_have_text("succeeded", timeout=30_000)
    expect(live).to_have_count(0)
    expect(page.locator("#step-table")).to_contain_text("email_customer", timeout=30_000)


# --- notifications with a real worker -------------------------------------------------------


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_webhook_and_email_arrive_once_per_event_then_a_reminder(
    page: Page, live_server, execute, crash_at, clock, settings, tmp_path
) -> None:
    receiver, box = Receiver(), Mailbox()
    smtp = Controller(box, hostname="127.0.0.1", port=free_port())
    smtp.start()
    notify_env = {
        "RUNLEDGER_NOTIFY_WEBHOOK_URL": f"http://127.0.0.1:{receiver.port}/hook",
        "RUNLEDGER_NOTIFY_EMAIL_TO": "oncall@example.com",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp.port),
        "RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS": "4",
    }
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = notify_env["RUNLEDGER_NOTIFY_WEBHOOK_URL"]
    settings.RUNLEDGER_NOTIFY_EMAIL_TO = ["oncall@example.com"]
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", smtp.port
    # The run blocks on the rewound test clock, hours ago: it is reminded of at once; the
    # proposal is made on the live server's real clock and reminded of after 4 s.
    path = str(django_settings.BASE_DIR)
    try:
        with Cluster(
            tmp_path / "cluster", lease_seconds=5, env={"PYTHONPATH": path, **notify_env}
        ) as cluster:
            cluster.worker("w1")
            with cluster.producing():
                run = renewal_run(execute, crash_at, customer="cus_hopper")
                assert wait_for(lambda: len(receiver.requests) >= 1, timeout=60)
                assert wait_for(lambda: len(box.messages) >= 1, timeout=60)
                assert "needs_attention" in receiver.events()
                user_in("operator", "olive")
                sign_in(page, live_server.url, "olive")
                page.goto(f"{live_server.url}/settlements/")
                row = page.locator("table.queue tbody tr", has_text=run.run_id)
                row.get_by_role("link", name="Settle").click()
                page.check("input[name=outcome][value=not_happened]")
                page.fill("#id_reason", "no charge in the gateway's report")
                page.get_by_role("button", name=re.compile("Propose")).click()
                assert wait_for(lambda: "approval_waiting" in receiver.events(), timeout=60)
                waited = timezone.now() + timedelta(seconds=4.5)
                assert wait_for(lambda: timezone.now() > waited, timeout=30)
                tasks.notifications.delay()  # what beat sends every RUNLEDGER_NOTIFY_EVERY_SECONDS
                assert wait_for(lambda: len(receiver.requests) >= 4, timeout=60)
                assert wait_for(lambda: len(box.messages) >= 4, timeout=60)
            page.goto(f"{live_server.url}/runs/{run.run_id}/")
            expect(page.locator("#run-told")).to_contain_text("sent")
    finally:
        smtp.stop()
        receiver.stop()
        connection.close()
    assert receiver.events() == [
        "approval_waiting",
        "needs_attention",
        "reminder:approval",
        "reminder:run",
    ]
    keys = [k for k, _ in receiver.requests]
    assert len(keys) == len(set(keys)) == 4  # once per event to this channel
    assert len(box.messages) == 4
    rows = Notification.objects.all()
    assert rows.count() == 8 and {r.status for r in rows} == {DeliveryStatus.SENT}
