"""The Approvals queue through Django's test client: the list, one gate with its exact arguments
and digest, approve and reject with a reason, a second approver clicking the same button, and
the signed link of the notification — every refusal leaves the rows as they were."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from harness.cluster import Cluster
from ledger import transitions
from ledger.examples.models import ProviderCharge
from ledger.models import AuditEvent, Gate, Run
from tests.support.dashboard_runs import client_for, start, user_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


def state() -> Any:
    return (
        list(Gate.objects.values_list("pk", "status", "approved_by", "links_used", "version")),
        list(Run.objects.values_list("run_id", "status", "version")),
        AuditEvent.objects.count(),
    )


@pytest.fixture
def gate(execute, clock) -> Gate:
    run = start("payout", {"invoice_id": "inv_1004"}, clock)
    assert execute(run.run_id).reason == "approval"
    return Gate.objects.get(run=run)


def test_the_queue_and_the_gate_page_show_the_exact_arguments_and_digest(gate) -> None:
    viewer = client_for(user_in("viewer", name="vera"))
    page = viewer.get("/approvals/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"#{gate.pk}" in html and gate.run_id in html and "pay_out" in html
    detail = viewer.get(f"/approvals/{gate.pk}/").content.decode()
    assert gate.digest in detail
    assert "&quot;amount_cents&quot;:15000,&quot;customer&quot;:&quot;cus_barbara&quot;" in detail
    assert "Only a person with the approver role decides." in detail
    approver = client_for(user_in("approver", name="abe"))
    run_page = approver.get(f"/runs/{gate.run_id}/").content.decode()
    assert f'href="/approvals/{gate.pk}/"' in run_page and "Approve or reject" in run_page
    before = state()
    assert viewer.post(f"/approvals/{gate.pk}/approve/", {"reason": ""}).status_code == 403
    assert state() == before


def test_approve_queues_the_run_and_a_second_approver_gets_a_clear_refusal(gate) -> None:
    bob = client_for(user_in("approver", name="bob"))
    carol = client_for(user_in("approver", name="carol"))
    done = bob.post(f"/approvals/{gate.pk}/approve/", {"reason": "checked"}, follow=True)
    assert done.status_code == 200
    assert "the run is queued" in done.content.decode()
    gate.refresh_from_db()
    assert (gate.status, gate.approved_by) == ("approved", ["bob"])
    assert Run.objects.get().status == "queued"
    before = state()
    late = carol.post(f"/approvals/{gate.pk}/approve/", {"reason": "me too"})
    assert late.status_code == 409
    assert "Nothing was changed." in late.content.decode()
    assert "already approved by bob" in late.content.decode()
    assert carol.post(f"/approvals/{gate.pk}/reject/", {"reason": "no"}).status_code == 409
    assert state() == before


def test_reject_needs_a_reason(gate) -> None:
    bob = client_for(user_in("approver", name="bob"))
    before = state()
    assert bob.post(f"/approvals/{gate.pk}/reject/", {"reason": " "}).status_code == 400
    assert state() == before
    assert bob.post(f"/approvals/{gate.pk}/reject/", {"reason": "no"}).status_code == 302
    assert Gate.objects.get().status == "rejected"


def test_a_signed_link_works_once_for_its_user_and_still_needs_sign_in(gate, settings) -> None:
    bob_user = user_in("approver", name="bob")
    token = transitions.gate_link_token(gate=gate, username="bob")
    url = f"/approvals/link/{token}/"
    anonymous = Client().get(url)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    carol = client_for(user_in("approver", name="carol"))
    before = state()
    refused = carol.post(url, {"decision": "approve", "reason": ""})
    assert refused.status_code == 403 and "another user" in refused.content.decode()
    assert state() == before
    bob = client_for(bob_user)
    assert gate.digest in bob.get(url).content.decode()
    assert bob.post(url, {"decision": "approve", "reason": "from the email"}).status_code == 302
    gate.refresh_from_db()
    assert gate.status == "approved" and len(gate.links_used) == 1
    before = state()
    again = bob.post(url, {"decision": "approve", "reason": ""})
    assert again.status_code == 403 and "used already" in again.content.decode()
    settings.RUNLEDGER_APPROVAL_LINK_SECONDS = -1.0
    stale = bob.get(f"/approvals/link/{transitions.gate_link_token(gate=gate, username='bob')}/")
    assert stale.status_code == 403 and "expired" in stale.content.decode()
    assert state() == before
    assert ProviderCharge.objects.count() == 0
