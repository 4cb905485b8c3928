"""A step's failed attempts shown where people look: ``show_run`` and the run page, each
attempt with its exception, what came next and its traceback (escaped on the page)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from ledger import registry, transitions
from ledger.agents import agent, tool
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]

CALLS: list[int] = []


class QuotaExceeded(Exception):
    pass


def _ask_the_ledger_service(account: str) -> Any:
    CALLS.append(1)
    if len(CALLS) < 3:
        raise QuotaExceeded(f"<b>quota</b> of {account} exceeded (call {len(CALLS)})")
    return {"balance": 12}


@tool(kind="read", name="fd-balance", retries=2, backoff=0.25, jitter=0.0)
def read_balance(account: str) -> Any:
    return _ask_the_ledger_service(account)


@agent("fd-agent", tools=[read_balance])
def balance_agent(ctx: Any, inputs: Any) -> Any:
    return ctx.call(read_balance, step="balance", account="acct_7")


@pytest.fixture(autouse=True)
def _setup(settings) -> Iterator[None]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    restore_roles()
    CALLS.clear()
    registry._agents["fd-agent"] = balance_agent  # another test may have unregistered it
    yield


@pytest.fixture
def retried_run(execute) -> Any:
    run = transitions.run_start(agent="fd-agent", inputs={})
    assert execute(run.run_id).status == "succeeded"
    return run


def test_show_run_prints_every_failed_attempt_with_its_traceback(retried_run) -> None:
    out = io.StringIO()
    call_command("show_run", retried_run.run_id, stdout=out)
    text = out.getvalue()
    for attempt in (1, 2):
        assert (
            f"attempt {attempt} at 12:00:0" in text
            and f"QuotaExceeded: <b>quota</b> of acct_7 exceeded (call {attempt})" in text
        ), text
    assert "retry at 12:00:00.250000 (after 0.250s)" in text
    assert "retry at 12:00:00.750000 (after 0.500s)" in text
    assert "| Traceback (most recent call last):" in text
    assert "in balance_agent\n" in text and "in _ask_the_ledger_service\n" in text
    assert "ledger/engine/live.py" not in text


def test_the_run_page_lists_each_attempt_with_its_traceback_escaped(retried_run) -> None:
    client = Client()
    client.force_login(user_in("viewer"))
    html = client.get(f"/runs/{retried_run.run_id}/").content.decode()
    assert html.count('<li class="failure">') == 2
    assert "QuotaExceeded: &lt;b&gt;quota&lt;/b&gt; of acct_7 exceeded (call 2)" in html
    assert "<b>quota</b>" not in html
    assert "next attempt at 12:00:00.250000 UTC (after 0.250s)" in html  # the reader's zone
    assert '<details class="traceback"><summary>traceback</summary>' in html
    assert "in _ask_the_ledger_service" in html
