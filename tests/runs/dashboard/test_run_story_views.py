"""The run's story on its page (issue 23, item 2): the waterfall of steps, one bar per attempt,
drawn on the server as SVG."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.test import Client

from ledger import selectors
from tests.support.dashboard_runs import restore_roles, rewind, start, succeeded_run, user_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


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


def viewer() -> Client:
    client = Client()
    client.force_login(user_in("viewer", "vera"))
    return client


def waterfall_of(html: str) -> dict[str, list[str]]:
    """step id → the titles of its bars, from the page's SVG."""
    section = html[html.index('id="run-waterfall"') :]
    section = section[: section.index("</section>")]
    out: dict[str, list[str]] = {}
    for step_id, body in re.findall(
        r'<g class="wf-line" data-step="([^"]+)">(.*?)</g>', section, re.S
    ):
        out[step_id] = re.findall(r"<title>([^<]+)</title>", body)
    return out


def test_a_succeeded_run_draws_one_bar_per_step(execute) -> None:
    run = succeeded_run(execute)
    lines = waterfall_of(viewer().get(f"/runs/{run.run_id}/").content.decode())
    assert list(lines) == [
        "fetch_invoice",
        "decided_at",
        "decide",
        "refund",
        "email_customer",
        "notify",
    ]
    assert all(len(bars) == 1 and bars[0].endswith(", ok") for bars in lines.values())
    assert "refund (effect) attempt 1: starts +" in lines["refund"][0]


def test_each_failed_attempt_is_its_own_red_bar(execute) -> None:
    run = start("refund", {"invoice_id": "inv_missing"}, execute.clock)
    assert execute(run.run_id).status == "failed"
    rows, more = selectors.step_waterfall(run_id=run.run_id)
    assert not more and [r.step_id for r in rows] == ["fetch_invoice"]
    attempts = rows[0].attempts
    assert [(a.number, a.failed) for a in attempts] == [(1, True), (2, True), (3, True)]
    assert all(a.end is not None and a.end >= a.start for a in attempts)
    assert attempts[1].start >= attempts[0].end  # the second starts after the back-off
    html = viewer().get(f"/runs/{run.run_id}/").content.decode()
    bars = waterfall_of(html)["fetch_invoice"]
    assert [b.rsplit(", ", 1)[1] for b in bars] == ["failed", "failed", "failed"]
    assert html.count('fill="#b3261e"><title>fetch_invoice') == 3
