"""Any screen (issue 10): the list, the queue, a run page, a settle page, the audit, the
notifications and the admin's run and step lists in real Chromium at 390 px and 1280 px: the
document is never wider than the viewport (tables scroll inside their own box), and the top
bar's user name and Sign out stay on screen."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from ledger import registry
from ledger.models import Step
from tests.support.dashboard_runs import (
    PASSWORD,
    html_run,
    reconciliation_run,
    renewal_run,
    restore_roles,
    rewind,
    stale_run,
    survey_run,
    user_in,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def execute(execute, clock):
    execute.clock = clock
    return execute


@pytest.fixture(autouse=True)
def _clean(clock, settings) -> Iterator[None]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    rewind(clock)
    yield
    registry.unregister_agent("markup-agent")


def page_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


@pytest.mark.parametrize("width", [390, 1280])
def test_every_page_fits_the_screen_without_sideways_scrolling(
    page: Page, live_server, execute, crash_at, monkeypatch, width: int
) -> None:
    blocked = renewal_run(execute, crash_at)
    reconciliation_run(execute, crash_at)
    stale_run(execute, crash_at, monkeypatch)
    survey_run(execute, records=12)
    html_run(execute, crash_at)
    admin = user_in("", "root")
    User.objects.filter(pk=admin.pk).update(is_staff=True, is_superuser=True)
    charge = Step.objects.get(run=blocked, step_id="charge")
    page.set_viewport_size({"width": width, "height": 860})
    page.goto(f"{live_server.url}/")
    page.fill("#id_username", "root")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#run-table")).to_be_visible()
    pages = [
        "/",
        "/settlements/",
        f"/runs/{blocked.run_id}/",
        f"/runs/{blocked.run_id}/steps/{charge.pk}/settle/",
        "/audit/",
        "/notifications/",
        "/admin/ledger/run/",
        "/admin/ledger/step/",
    ]
    widths = {}
    for path in pages:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        widths[path] = page_width(page)
    assert {p: w for p, w in widths.items() if w > width} == {}
    page.goto(f"{live_server.url}/")
    signout = page.get_by_role("button", name=re.compile("Sign out", re.I))
    box = signout.bounding_box()
    assert box is not None and box["x"] + box["width"] <= width
