"""The runs list says whether the recovery sweep is alive (a dead beat strands crashed runs)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from ledger import transitions
from ledger.models import Beacon, Run
from ledger.processes import sweep
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def viewer() -> Client:
    restore_roles()
    client = Client()
    client.force_login(user_in("viewer"))
    return client


def test_the_list_warns_when_the_sweep_has_never_run_and_is_overdue(viewer, settings) -> None:
    settings.RUNLEDGER_SWEEP_SECONDS = 10
    # A fresh start: beat's first pass is seconds away; no banner (issue 35, item 7) ...
    assert 'class="sweep' not in viewer.get("/").content.decode()
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    page = viewer.get("/").content.decode()
    assert "recovery sweep has never run" not in page and 'class="sweep' not in page
    # ... until the first run has waited three intervals and a minute for it.
    Run.objects.filter(pk=run.run_id).update(created_at=timezone.now() - timedelta(seconds=91))
    page = viewer.get("/").content.decode()
    assert "recovery sweep has never run" in page
    assert 'class="sweep warn"' in page


def test_a_sweep_pass_records_its_beacon_and_the_list_shows_it_alive(viewer) -> None:
    assert sweep.runs_sweep() == []
    beacon = Beacon.objects.get(name="sweep")
    assert beacon.detail == {"requeued": 0}
    page = viewer.get("/").content.decode()
    assert "Recovery sweep alive" in page and 'class="sweep ok"' in page


def test_a_sweep_that_stopped_running_is_a_warning(viewer, settings) -> None:
    settings.RUNLEDGER_SWEEP_SECONDS = 10
    sweep.runs_sweep(clock=lambda: timezone.now() - timedelta(minutes=7))
    page = viewer.get("/").content.decode()
    # 7 minutes ago on the page's own clock: more if the machine is slow, never less than 6.
    minutes = re.search(r"has not run for (\d+) min", page)
    assert minutes is not None and int(minutes.group(1)) >= 6
    assert 'class="sweep warn"' in page
