"""Any screen, any reader (issue 23), measured as a person sees it, in real Chromium at 390 px
and 1280 px on every dashboard page with realistic runs: no word of 4+ letters has its rendered
boxes on two lines, no link or button sits off the screen, the document never scrolls sideways,
and axe-core (WCAG 2.1 A and AA) finds no serious or critical violation — the admin's ledger
pages too (issue 35: their lists and edit forms). The screenshots in the
docs are taken here (``make screenshots``). Then: focus survives a live refresh, and live
updates can be paused."""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from ledger import registry, transitions
from ledger.examples import pydantic_agents  # noqa: F401 - registers refund_pydantic_ai
from ledger.models import Gate, Run, Step
from ledger.processes.alerting import alerts_evaluate
from ledger.selectors import incident_groups
from ledger.transitions.handover import run_note, run_take
from ledger.transitions.pauses import pause_create
from runs.dashboard.models import Preference, TeamRole
from tests.support.dashboard_runs import (
    PASSWORD,
    held_polls,
    html_run,
    lookup_down_run,
    reconciliation_run,
    renewal_run,
    stale_run,
    start,
    succeeded_run,
    survey_run,
    user_in,
    wait_for_held_polls,
)
from tests.support.words import axe_violations, broken_words, off_screen_controls

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path(os.environ.get("RUNLEDGER_SCREENSHOTS") or tempfile.mkdtemp(prefix="shots-"))
#: The pages whose screenshots the docs show, at both widths.
SHOTS = {"/": "runs-list", "/settlements/": "settlement-queue"}


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""
    registry.unregister_agent("markup-agent")


def sign_in(page: Page, base: str, username: str, width: int = 1280) -> None:
    page.set_viewport_size({"width": width, "height": 860})
    page.goto(f"{base}/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()


def test_every_page_reads_whole_words_and_passes_axe_at_390_and_1280(
    page: Page, live_server, execute, crash_at, monkeypatch, settings
) -> None:
    settings.RUNLEDGER_ALERT_RULES = json.dumps(
        [{"name": "blocked-15m", "kind": "blocked_longer", "minutes": 15, "per": "agent"}]
    )
    blocked = renewal_run(execute, crash_at)
    framework = transitions.run_start(
        agent="refund_pydantic_ai", inputs={"invoice_ids": ["inv_1001", "inv_1003"]}
    )
    assert execute(framework.run_id).status == "succeeded"  # its transcript's JSON at 390 px
    reconciliation_run(execute, crash_at)
    stale = stale_run(execute, crash_at, monkeypatch)
    survey = survey_run(execute, records=12)
    html_run(execute, crash_at)
    succeeded_run(execute)
    # A second team (issue 35, teams): the list's Team column and filter, the run's team.
    payout = start("payout", {"invoice_id": "inv_1004"}, execute.clock, team="payments")
    assert execute(payout.run_id).reason == "approval"
    gate = Gate.objects.get(run=payout)
    charge = Step.objects.get(run=blocked, step_id="charge")
    story = the_story_and_its_evidence(execute, crash_at, monkeypatch, blocked, charge)
    pause_create(scope="tool", target="refund_charge", by="root", reason="provider incident")
    held = start("refund", {"invoice_id": "inv_1005"}, execute.clock)
    assert execute(held.run_id).status == "paused"  # at its refund: the tool is paused
    story.append(f"/runs/{held.run_id}/")
    admin = user_in("operator", "root")
    User.objects.filter(pk=admin.pk).update(is_staff=True, is_superuser=True)
    # Handover and the reader's zone, as a team uses them: olivia is on the blocked run and
    # left a note; root reads every time in a zone with a long name.
    olivia = user_in("operator", "olivia")
    TeamRole.objects.create(user=olivia, team="payments", role="approver")
    run_take(run_id=blocked.run_id, by="olivia")
    run_note(
        run_id=blocked.run_id,
        by="olivia",
        text="Phoned the provider about the refund for inv_1001: their support engineer "
        "promised an answer before Thursday afternoon; keep the customer informed meanwhile.",
    )
    Preference.objects.create(
        user=admin, time_zone="America/Argentina/Buenos_Aires", updated_at=timezone.now()
    )
    schedule = schedules_as_a_team_has_them(execute)
    model_step = Step.objects.get(run=stale, step_id=stale.blocked_step_id)
    alerts_evaluate(clock=lambda: timezone.now() + timedelta(hours=1))  # an open incident
    groups = incident_groups(failed_since=timezone.now() - timedelta(days=1))
    # Tokens and cost as a provider's answers report them (issue 35): on the run page, the
    # list, Trends and the admin's step page. (The scripted models here report no usage.)
    Step.objects.filter(kind="model").update(
        tokens_in=18234, tokens_out=1271, cost_usd=Decimal("0.073767"), model_id="claude-sonnet-4-5"
    )
    dashboard = [
        "/",
        "/?status=needs_attention&order=oldest",
        "/settlements/",
        f"/runs/{blocked.run_id}/",
        f"/runs/{stale.run_id}/",
        f"/runs/{survey.run_id}/",
        f"/runs/{framework.run_id}/",
        f"/runs/{blocked.run_id}/steps/{charge.pk}/settle/",
        f"/runs/{stale.run_id}/steps/{model_step.pk}/stale/",
        f"/runs/{survey.run_id}/fork/",
        f"/runs/{survey.run_id}/clean/",
        f"/runs/{blocked.run_id}/resume/",
        "/bulk/?action=resume&scope=filter&status=needs_attention",
        "/approvals/",
        f"/approvals/{gate.pk}/",
        "/audit/",
        "/notifications/",
        "/effects/",
        "/deploy/",
        "/pauses/",
        "/pacing/",
        "/schedules/",
        f"/?schedule={schedule}",
        *story,
        "/trends/",
        "/trends/?window=7d",
        "/incidents/",
        f"/incidents/group/?{urlencode(groups[0].query())}",
        "/alerts/",
        "/preferences/",
        "/?taken=nobody",
        "/?team=payments",
        f"/runs/{payout.run_id}/",
    ]
    # The admin's ledger pages (issue 35): lists and edit forms, read as the dashboard is.
    admin_pages = [
        "/admin/ledger/run/",
        "/admin/ledger/step/",
        f"/admin/ledger/run/{blocked.run_id}/change/",
        f"/admin/ledger/step/{charge.pk}/change/",
        f"/admin/ledger/step/{model_step.pk}/change/",
        # A person's roles in teams, inline on their page (issue 35, teams).
        f"/admin/auth/user/{olivia.pk}/change/",
    ]
    broken: dict[str, list[str]] = {}
    off_screen: dict[str, list[str]] = {}
    too_wide: dict[str, int] = {}
    axe: dict[str, list[str]] = {}
    sign_in(page, live_server.url, "root", 390)
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 860})
        for path in dashboard + admin_pages:
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None and response.status == 200, path
            page.wait_for_load_state("load")
            # Every collapsed part opened (step inputs, tracebacks, errors, reasons): what a
            # person reads once they open it must fit too.
            page.evaluate("document.querySelectorAll('main details').forEach(d => d.open = true)")
            where = f"{width} {path}"
            scroll_width = int(page.evaluate("document.documentElement.scrollWidth"))
            if scroll_width > width:
                too_wide[where] = scroll_width
            if found := broken_words(page):
                broken[where] = found
            # On a phone nothing may need a sideways scroll; on a desktop a wide table may scroll
            # inside its own box (hinted, reachable by keyboard), never the page.
            controls = off_screen_controls(page, width) if path not in admin_pages else []
            if width > 640:
                controls = [c for c in controls if not c.endswith("(in a scrolling block)")]
            if controls:
                off_screen[where] = controls
            if found := axe_violations(page):
                axe[where] = found
            if path in SHOTS:
                shot = SCREENSHOTS / f"{SHOTS[path]}-{width}.png"
                page.screenshot(path=str(shot), full_page=True)
    found = {"broken words": broken, "off screen": off_screen, "too wide": too_wide, "axe": axe}
    if any(found.values()):
        pytest.fail(json.dumps(found, indent=1))


def schedules_as_a_team_has_them(execute: Any) -> str:
    """A nightly cron schedule in a far zone with a long description, one paused, and one
    that ticked (its run executed); the id of the one that ticked."""
    from ledger.processes.schedules import schedules_tick

    transitions.schedule_add(
        name="nightly-reconciliation-of-the-payment-providers-statements",
        agent="refund",
        inputs={"invoice_id": "inv_1001"},
        cron="30 2 * * 1-5",
        timezone_name="America/Argentina/Buenos_Aires",
        missed="once",
        description="Reconciles yesterday's statements from every payment provider before the "
        "finance team starts its morning",
        by="root",
    )
    paused = transitions.schedule_add(
        name="hourly", agent="refund", inputs={"invoice_id": "inv_1002"}, interval=3600, by="root"
    )
    transitions.schedule_pause(schedule_id=paused.schedule_id, by="root", reason="quarter end")
    ticked = transitions.schedule_add(
        name="every-minute", agent="refund", inputs={"invoice_id": "inv_1003"}, interval=60,
        by="root", clock=execute.clock,
    )  # fmt: skip
    execute.clock.now = ticked.next_at + timedelta(seconds=1)  # its first tick is due
    (run_id,) = schedules_tick(clock=execute.clock)
    execute(run_id)
    return ticked.schedule_id


def the_story_and_its_evidence(
    execute: Any, crash_at: Any, monkeypatch: Any, blocked: Run, charge: Step
) -> list[str]:
    """The pages of issue 23's story and evidence with realistic rows: a renewal's settlement
    proposed with the wrong amount (flagged) and another's with the right one (inline Approve),
    a gate whose arguments disagree with the run's inputs, a cancelled run, a fork, the resume
    form of an effect its lookup settles (the caller adds a paused run). Returns their paths."""
    olive = user_in("operator", "olive")
    right = renewal_run(execute, crash_at, customer="cus_lovelace")
    for step, amount in ((charge, 900), (Step.objects.get(run=right, step_id="charge"), 24900)):
        transitions.settlement_propose(
            step=step,
            outcome="happened",
            result={"gateway_ref": f"gw_{step.run_id[-8:]}", "amount_cents": amount},
            reason="the gateway's statement lists the renewal charge for this customer",
            by=olive,
            seen_version=step.version,
        )
    asked = start("payout", {"invoice_id": "inv_1002", "customer": "cus_margaret"}, execute.clock)
    assert execute(asked.run_id).reason == "approval"
    gate = Gate.objects.get(run=asked)
    cancelled = reconciliation_run(execute, crash_at)
    fork = transitions.run_fork(
        run_id=cancelled.run_id,
        step_id="email_customer",
        by=olive,
        reason="send the team notification again from a copy",
        confirm_resend=1,
        clock=execute.clock,
    )
    transitions.run_cancel(
        run_id=cancelled.run_id,
        by=olive,
        reason="the customer withdrew the refund request by phone",
        seen_version=None,
        clock=execute.clock,
    )
    down = lookup_down_run(execute, crash_at, monkeypatch)
    return [
        f"/runs/{blocked.run_id}/steps/{charge.pk}/settle/",
        f"/approvals/{gate.pk}/",
        f"/runs/{asked.run_id}/",
        f"/runs/{cancelled.run_id}/",
        f"/runs/{fork.run_id}/",
        f"/runs/{down.run_id}/resume/",
    ]


def test_the_menu_folds_on_a_narrow_screen_and_every_page_has_its_landmarks(
    page: Page, live_server
) -> None:
    user_in("viewer", name="vic")
    sign_in(page, live_server.url, "vic", 390)
    nav = page.get_by_role("navigation", name="Main")
    expect(nav).to_be_hidden()
    menu = page.get_by_role("button", name="Menu")
    expect(menu).to_have_attribute("aria-expanded", "false")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(nav).to_be_visible()
    signout = page.get_by_role("button", name=re.compile("Sign out", re.I))
    box = signout.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390
    runs = nav.get_by_role("link", name="Runs", exact=True)
    expect(runs).to_have_attribute("aria-current", "page")
    page.goto(f"{live_server.url}/audit/")
    expect(page.locator("#topnav a[aria-current=page]")).to_have_text("Audit")
    expect(page.get_by_role("main")).to_have_count(1)
    # The skip link is the first Tab stop and lands on the main content.
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()


def test_focus_survives_a_live_refresh_and_live_updates_pause(
    page: Page, live_server, settings, execute
) -> None:
    settings.RUNLEDGER_LIST_REFRESH_SECONDS = 1
    first = succeeded_run(execute)
    user_in("viewer", name="vic")
    sign_in(page, live_server.url, "vic")
    link = page.locator(f'#run-table a[href="/runs/{first.run_id}/"]')
    link.focus()
    expect(link).to_be_focused()
    moved = transitions.run_start(agent="survey", inputs={"records": 3})
    # A live refresh replaced the table (the new run is in it): the same link still has focus,
    # and the one status region (outside the swapped table) is still the same element.
    expect(page.locator("#run-table")).to_contain_text(moved.run_id)
    expect(page.locator(f'#run-table a[href="/runs/{first.run_id}/"]')).to_be_focused()
    assert page.evaluate("document.activeElement.getAttribute('href')") == f"/runs/{first.run_id}/"

    pause = page.get_by_role("button", name="Pause live updates")
    pause.click()
    expect(page.get_by_role("button", name="Resume live updates")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(page.locator("#live-status")).to_have_text("Live updates paused")
    held = held_polls(page, "#run-table")
    wait_for_held_polls(page, "#run-table", 2)  # polls came due and were not sent
    assert held_polls(page, "#run-table") >= held + 2
    quiet = transitions.run_start(agent="survey", inputs={"records": 4})
    wait_for_held_polls(page, "#run-table", 2)
    expect(page.locator("#run-table")).not_to_contain_text(quiet.run_id)
    # Paused survives a reload (the operator's choice), and resuming refreshes at once.
    page.reload()
    resume = page.get_by_role("button", name="Resume live updates")
    resume.click()
    expect(page.get_by_role("button", name="Pause live updates")).to_be_visible()
    page.evaluate("localStorage.removeItem('runledger.live.paused')")
