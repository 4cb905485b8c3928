"""A queued run held back by flow control says why on its page (concurrency key, start time)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ledger import api, transitions
from tests.support import paced_agents  # noqa: F401 - registers the agents
from tests.support.dashboard_runs import signed_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""


def test_a_run_held_by_its_key_says_why_on_its_page() -> None:
    first = api.start_run("paced", {"customer": "cus_42"}).run_id
    held = api.start_run("paced", {"customer": "cus_42"}).run_id
    assert transitions.lease_claim(run_id=first, owner="w1") is not None
    assert transitions.lease_claim(run_id=held, owner="w2") is None
    page = signed_in("viewer").get(f"/runs/{held}/").content.decode()
    assert 'id="run-waiting"' in page
    assert "waiting: 1 of 1 running for customer cus_42" in page
    assert "customer:cus_42" in page


def test_a_delayed_run_says_when_it_starts() -> None:
    later = timezone.now() + timedelta(hours=3)
    run_id = api.start_run("paced-free", {}, start_at=later).run_id
    page = signed_in("viewer").get(f"/runs/{run_id}/").content.decode()
    assert f"waiting to start at {later:%Y-%m-%d %H:%M:%S}" in page
