"""The Pacing page and its metrics (issue 34, item 6): per concurrency key the runs running and
held back, per rate limit its next slot, the calls waiting and the runs released to wait;
escaped, behind the viewer's permission, and exported as gauges with bounded labels."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from ledger import api, ratelimits, transitions
from ledger.models import RateHold
from ledger.transitions import ratelimits as rate_writes
from tests.support import paced_agents, ratelimited_agents  # noqa: F401 - registers the agents
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = '<script>alert("k")</script>'


def _claim(run_id: str, owner: str) -> str | None:
    return transitions.lease_claim(run_id=run_id, owner=owner, seconds=30)


@override_settings(RUNLEDGER_RATE_LIMITS='{"model:claude-haiku-4-5": {"requests": "4000/min"}}')
def test_the_page_shows_what_runs_and_what_is_held_back_per_key_and_per_limit() -> None:
    restore_roles()
    running = api.start_run("paced", {"customer": HOSTILE}).run_id
    held = api.start_run("paced", {"customer": HOSTILE}).run_id
    assert _claim(running, "w1") is not None and _claim(held, "w2") is None
    now = timezone.now()
    take = ratelimits.Take("tool:rated_ping", "requests", ratelimits.parse("10/min"))
    for _ in range(3):  # one free now, two calls waiting (6 and 12 s)
        rate_writes.rate_take(take=take, now=now)
    released = api.start_run("rated", {"calls": 1}).run_id
    rate_writes.rate_hold(
        run_id=released, step_id="ping.0", slots={"tool:rated_ping": now + timedelta(seconds=18)}
    )
    client = Client()
    client.force_login(user_in("viewer"))
    page = client.get("/pacing/").content.decode()
    assert 'aria-current="page">Pacing</a>' in page
    assert HOSTILE not in page and "customer:&lt;script&gt;alert(&quot;k&quot;)" in page
    keys = page[page.index('id="concurrency-keys"') : page.index('id="rate-limits"')]
    assert "1 of 1" in keys and "<b>1</b>" in keys  # one running, one held back
    limits = page[page.index('id="rate-limits"') :]
    assert "tool:rated_ping" in limits and "10/min" in limits and "(tool)" in limits
    assert f'href="/runs/{released}/"' in limits  # the run released to wait for its slot
    assert "model:claude-haiku-4-5" in limits and "(setting)" in limits
    fragment = client.get("/pacing/", headers={"HX-Request": "true"}).content.decode()
    assert fragment.startswith('<div id="pacing-tables"') and "<html" not in fragment
    assert RateHold.objects.count() == 1  # the page wrote nothing


def test_the_page_needs_a_sign_in() -> None:
    assert Client().get("/pacing/").status_code == 302


def test_the_metrics_export_keys_and_limits_with_bounded_labels() -> None:
    from runs.operations import metrics

    for n in range(metrics.KEYS_EXPORTED + 5):  # more keys than are exported one by one
        api.start_run("paced", {"customer": f"cus_{n}"})
    take = ratelimits.Take("tool:rated_ping", "requests", ratelimits.parse("10/min"))
    now = timezone.now()
    for _ in range(3):
        rate_writes.rate_take(take=take, now=now)
    lines = metrics.exposition()[0].decode().splitlines()
    held = [line for line in lines if line.startswith("runledger_concurrency_held{")]
    assert len(held) == metrics.KEYS_EXPORTED + 1  # the busiest, and the rest as (other)
    assert 'runledger_concurrency_held{key="(other)"} 5.0' in held
    waiting = 'runledger_rate_limit_calls_waiting{budget="requests",key="tool:rated_ping"}'
    assert any(line.startswith(waiting) and float(line.split()[-1]) >= 1 for line in lines)
    assert any(line.startswith("runledger_rate_limit_taken{") and "3.0" in line for line in lines)
