"""Defects found in the review pass, each shown by the state after the act (real database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from ledger import services
from ledger.models import AuditEvent, Run
from runs.cluster import Cluster
from tests.dashboard_support import restore_roles, user_in

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    """A broker folder of this test's own (no workers): what the views enqueue lands here."""
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


@pytest.fixture
def operator() -> Client:
    restore_roles()
    client = Client(raise_request_exception=False)
    client.force_login(user_in("operator", name="olive"))
    return client


# PostgreSQL refuses a NUL byte in any text parameter; a run id from the URL or a form reached
# the query as it was typed, and the page answered 500 instead of "no such run".
NUL_RUN_URLS = [
    "/runs/abc%00/",
    "/runs/abc%00/header/",
    "/runs/abc%00/steps/",
    "/runs/abc%00/preview/",
    "/runs/abc%00/ledger.json",
    "/runs/abc%00/steps/1/result/",
    "/runs/abc%00/steps/1/settle/",
    "/runs/abc%00/steps/1/stale/",
    "/runs/abc%00/fork/",
    "/runs/abc%00/resume/",
    "/runs/abc%00/cancel/",
]


@pytest.mark.parametrize("url", NUL_RUN_URLS)
def test_a_run_id_with_a_nul_byte_is_404_not_500(operator, url) -> None:
    assert operator.get(url).status_code == 404


def test_a_nul_byte_in_a_bulk_selection_is_a_message_not_500(operator) -> None:
    run = services.run_start(agent="survey", inputs={"records": 1})
    response = operator.get(f"/bulk/?action=cancel&run=a%00b&run={run.run_id}")
    assert response.status_code == 200
    assert run.run_id in response.content.decode()
    response = operator.post(
        "/bulk/apply/",
        {"action": "cancel", "reason": "x", "target": ["a\x00b:1", f"{run.run_id}:{run.version}"]},
    )
    assert response.status_code == 200
    assert "damaged target" in response.content.decode()
    assert Run.objects.get(pk=run.run_id).status == "cancelled"
    assert AuditEvent.objects.filter(run_id=run.run_id, action="run_cancel").count() == 1
