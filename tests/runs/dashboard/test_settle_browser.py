"""Settling an ambiguous charge by hand, end to end: real Chromium, a live server, and a real
Celery worker process that resumes the run after the approval.

The run is the example ``renewal`` agent: its card charge goes through a legacy gateway with no
read path, so a crash around the charge leaves a ``started`` row nobody can look up. The crash
happens in the test's process (a named crash point), the dashboard runs in the live server, the
approval enqueues ``resume_run`` after its commit (to the cluster's broker), and the worker
resumes the run from the ledger. The seed's pair is asserted at the end: the run's outcome AND
the number of charges the gateway holds.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from playwright.sync_api import Page, expect

from harness.cluster import Cluster, wait_for
from ledger.examples.models import GatewayCharge
from ledger.models import AuditEvent, Run, Step
from tests.support.dashboard_runs import (
    PASSWORD,
    budget_run,
    lookup_down_run,
    renewal_run,
    succeeded_run,
    user_in,
    wait_for_held_polls,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),  # the worker shares the test DB
]

#: Where the screenshots go: a temporary folder, or docs/screenshots (the README shows them)
#: under `make screenshots`, so that running the suite leaves the tree clean.
SCREENSHOTS = Path(os.environ.get("RUNLEDGER_SCREENSHOTS") or tempfile.mkdtemp(prefix="shots-"))


@pytest.fixture(autouse=True)
def _clean(dashboard_ready, settings) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True
    settings.RUNLEDGER_LIST_REFRESH_SECONDS = 1  # the run page follows the worker closely


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Cluster]:
    """One real worker on a broker of this test's own; the live server's enqueues go there."""
    path = str(django_settings.BASE_DIR)
    with Cluster(tmp_path / "cluster", lease_seconds=5, env={"PYTHONPATH": path}) as cluster:
        cluster.worker("w1")
        with cluster.producing():
            yield cluster
    connection.close()


def sign_in(page: Page, base: str, username: str) -> None:
    page.set_viewport_size({"width": 1360, "height": 900})
    page.goto(f"{base}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()


def sign_out(page: Page) -> None:
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/"))


def propose_from_the_queue(
    page: Page, base: str, run: Run, outcome: str, reason: str, result: str = ""
) -> None:
    """As the signed-in operator: open the queue, open the step, propose an outcome."""
    page.goto(f"{base}/settlements/")
    row = page.locator("table.queue tbody tr", has_text=run.run_id)
    expect(row).to_contain_text("charge_card_legacy")
    expect(row).to_contain_text("no lookup")
    row.get_by_role("link", name="Settle").click()
    expect(page.locator("h1")).to_contain_text("Did charge happen?")
    expect(page.locator(".effect-key")).to_have_text(f"{run.run_id}:charge")
    expect(page.locator(".evidence")).to_contain_text("has no read path")
    page.check(f"input[name=outcome][value={outcome}]")
    if result:
        page.fill("#id_result", result)
    page.fill("#id_reason", reason)


def approve_as(page: Page, base: str, run: Run, approver: str) -> None:
    sign_in(page, base, approver)
    page.goto(f"{base}/settlements/")
    row = page.locator("table.queue tbody tr", has_text=run.run_id)
    row.get_by_role("link", name="Review").click()
    expect(page.locator("#proposal")).to_contain_text("proposed by olive")
    page.fill("#approve-form textarea[name=reason]", "checked against the gateway's statement")
    page.get_by_role("button", name="Approve and resume the run").click()
    expect(page).to_have_url(re.compile(f"/runs/{run.run_id}/$"))
    expect(page.locator(".messages")).to_contain_text("Approved olive")


def test_it_happened_proposed_approved_and_resumed_by_the_worker_charges_once(
    page: Page, live_server, execute, crash_at, worker, clock, monkeypatch
) -> None:
    run = renewal_run(execute, crash_at, point="gateway.after_effect")
    [charge] = GatewayCharge.objects.filter(customer="cus_hopper")  # taken; the answer lost
    clock.advance(600)
    lookup_down_run(execute, crash_at, monkeypatch)  # another, younger, whose tool can look up
    user_in("operator", name="olive")
    user_in("approver", name="amy")
    base = live_server.url

    sign_in(page, base, "olive")
    result = json.dumps({"gateway_ref": charge.gateway_ref, "amount_cents": charge.amount_cents})
    propose_from_the_queue(
        page, base, run, "happened", "the charge is on the gateway's statement", result
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "settle-step.png"), full_page=True)
    page.get_by_role("button", name="Propose").click()
    expect(page.locator(".messages")).to_contain_text("waits for a different person")
    expect(page.locator("#proposal")).to_contain_text(charge.gateway_ref)
    assert Step.objects.get(run=run, step_id="charge").status == "started"
    sign_out(page)

    sign_in(page, base, "amy")
    page.goto(f"{base}/settlements/")
    expect(page.locator("table.queue")).to_contain_text("by olive")
    page.screenshot(path=str(SCREENSHOTS / "settlement-queue.png"), full_page=True)
    sign_out(page)
    approve_as(page, base, run, "amy")

    # The page follows the run while the worker resumes it: queued → running → succeeded.
    header = page.locator("#run-header")
    expect(header.locator(".title-row")).to_contain_text("succeeded", timeout=120_000)
    expect(page.locator("#step-table")).to_contain_text("receipt")
    expect(page.locator("#step-table")).to_contain_text("settled by olive, approved by amy")
    expect(page.locator("#run-audit")).to_contain_text("settlement_approve")

    run.refresh_from_db()
    assert run.status == "succeeded" and run.result["gateway_ref"] == charge.gateway_ref
    assert GatewayCharge.objects.filter(customer="cus_hopper").count() == 1
    # The worker process resumed it (the test's process executed it twice: crash, block).
    assert f"resume of run {run.run_id}: succeeded" in worker.log("w1", tail=500)
    assert (run.executions, run.resume_count) == (3, 2)


def test_did_not_happen_approved_is_sent_again_under_the_same_key_once(
    page: Page, live_server, execute, crash_at, worker
) -> None:
    run = renewal_run(execute, crash_at, point="gateway.before_effect")
    assert not GatewayCharge.objects.exists()  # the intent was written; the gateway never called
    intent = Step.objects.get(run=run, step_id="charge")
    user_in("operator", name="olive")
    user_in("approver", name="amy")
    base = live_server.url

    sign_in(page, base, "olive")
    propose_from_the_queue(
        page, base, run, "not_happened", "no charge under this reference in the gateway's log"
    )
    page.get_by_role("button", name="Propose").click()
    expect(page.locator("#proposal")).to_contain_text("it did not happen")
    sign_out(page)
    approve_as(page, base, run, "amy")

    expect(page.locator("#run-header .title-row")).to_contain_text("succeeded", timeout=120_000)
    charge = Step.objects.get(run=run, step_id="charge")
    assert (charge.status, charge.attempt) == ("succeeded", 2)
    assert charge.effect_key == intent.effect_key
    [sent] = GatewayCharge.objects.all()
    assert (sent.customer, sent.reference) == ("cus_hopper", intent.effect_key)
    run.refresh_from_db()
    assert run.status == "succeeded" and run.result["gateway_ref"] == sent.gateway_ref
    assert f"resume of run {run.run_id}: succeeded" in worker.log("w1", tail=500)


def test_bulk_resume_of_ticked_runs_previews_then_the_worker_resumes_each(
    page: Page, live_server, execute, crash_at, worker, settings
) -> None:
    stopped = [budget_run(execute, crash_at), budget_run(execute, crash_at)]
    done = succeeded_run(execute)
    user_in("operator", name="olive")
    sign_in(page, live_server.url, "olive")

    def table_poll(request: Any) -> bool:
        return request.headers.get("hx-target") == "run-table"

    with page.expect_request(table_poll, timeout=120_000):
        pass  # unticked, the table refreshes itself
    for run in (*stopped, done):
        page.check(f"input[data-pick][value={run.run_id}]")
    polls: list[str] = []
    page.on("request", lambda r: polls.append(r.url) if table_poll(r) else None)
    # Three refreshes came due and were held back: a table with ticked rows holds still.
    wait_for_held_polls(page, "#run-table", 3)
    assert polls == []

    page.select_option("#bulk-form select[name=action]", "resume")
    page.fill("#bulk-form input[name=max_resumes]", "2")
    page.get_by_role("button", name="Preview on the selected runs").click()
    expect(page.locator("#will-count")).to_have_text("2")
    expect(page.locator("table.bulk")).to_contain_text("budget 0 → 2")
    expect(page.locator("table.bulk tr.skip")).to_contain_text("skip: succeeded")
    assert {r.status for r in Run.objects.filter(pk__in=[r.run_id for r in stopped])} == {
        "needs_attention"
    }  # the preview wrote nothing
    page.fill("#bulk-apply-form textarea[name=reason]", "the outage is over")
    page.get_by_role("button", name="Resume 2 runs").click()
    expect(page.locator("#done-count")).to_have_text("2")
    expect(page.locator("#refused-count")).to_have_text("0")

    for run in stopped:
        assert wait_for(lambda r=run: _status(r) == "succeeded", timeout=120), worker.log("w1")
        run.refresh_from_db()
        assert (run.max_resumes, run.resume_count) == (2, 1)
    assert AuditEvent.objects.filter(action="run_resume", actor="olive").count() == 2


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.run_id)
