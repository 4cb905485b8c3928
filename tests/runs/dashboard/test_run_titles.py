"""Run titles and labels (issue 10): declared by the agent, made from the inputs when the run
starts, shown in the list, the settlement queue and the run page, and searchable."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger import registry, selectors, transitions
from ledger.agents import agent
from ledger.errors import InvalidInput
from ledger.models import Run
from tests.support.dashboard_runs import (
    renewal_run,
    signed_in,
    start,
    user_in,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""
    registry.unregister_agent("titled-agent")


def test_a_run_is_titled_and_labelled_from_its_inputs_by_its_agent(clock) -> None:
    run = start("renewal", {"customer": "cus_hopper", "story": "killed mid-charge"}, clock)
    stored = Run.objects.get(pk=run.run_id)
    assert stored.title == "Renew the subscription of cus_hopper"
    assert stored.labels == {"customer": "cus_hopper"}


def test_a_title_that_cannot_be_made_is_empty_and_the_run_still_starts(clock) -> None:
    @agent("titled-agent", title="Order {order_id} for {customer}", labels=("order_id", "nested"))
    def titled(ctx, inputs):
        return None

    run = start("titled-agent", {"order_id": 7, "nested": {"a": 1}}, clock)
    stored = Run.objects.get(pk=run.run_id)
    assert (stored.title, stored.labels) == ("", {"order_id": "7"})


@pytest.mark.parametrize(
    ("inputs", "message"),
    [([1, 2], "takes a JSON object"), ({}, "needs inputs customer"), ({"customer": ""}, "needs")],
)
def test_inputs_without_what_the_agent_requires_are_refused_before_anything_is_written(
    inputs, message, clock
) -> None:
    with pytest.raises(InvalidInput, match=message):
        transitions.run_start(agent="renewal", inputs=inputs, clock=clock)
    assert not Run.objects.exists()


def test_the_list_and_the_queue_name_each_run_by_its_title(execute, crash_at) -> None:
    hopper = renewal_run(execute, crash_at, customer="cus_hopper")
    knuth = renewal_run(execute, crash_at, point="gateway.before_effect", customer="cus_knuth")
    viewer = signed_in("operator")
    listed = viewer.get("/").content.decode()
    queue = viewer.get("/settlements/").content.decode()
    for html in (listed, queue):
        assert "Renew the subscription of cus_hopper" in html
        assert "Renew the subscription of cus_knuth" in html
        assert hopper.run_id in html and knuth.run_id in html
    page = viewer.get(f"/runs/{hopper.run_id}/").content.decode()
    assert '<h1 class="run-title">Renew the subscription of cus_hopper</h1>' in page
    assert "?q=customer:cus_hopper" in page


def test_the_search_finds_runs_by_title_words_by_label_and_by_id_prefix(clock) -> None:
    hopper = start("renewal", {"customer": "cus_hopper"}, clock)
    knuth = start("renewal", {"customer": "cus_knuth"}, clock)
    refund = start("refund", {"invoice_id": "inv_1001"}, clock)

    def found(text: str) -> set[str]:
        flt = selectors.RunFilter(search=text)
        return {r.run_id for r in selectors.runs_page(flt=flt, now=clock()).runs}

    assert found("HOPPER") == {hopper.run_id}
    assert found("subscription of") == {hopper.run_id, knuth.run_id}
    assert found("customer:cus_knuth") == {knuth.run_id}
    assert found("invoice_id:inv_1001") == {refund.run_id}
    assert found("customer:nobody") == set()
    assert found(refund.run_id[:12]) >= {refund.run_id}
    html = signed_in("viewer").get("/", {"q": "cus_hopper"}).content.decode()
    assert hopper.run_id in html and knuth.run_id not in html


def test_every_page_that_names_a_run_shows_its_title(execute, crash_at) -> None:
    """The settle page, the resume and cancel forms, the fork form, the audit, the deploy check
    and the bulk preview name a run by its title beside its id (issue 23, item 5)."""
    from ledger.models import Step

    hopper = renewal_run(execute, crash_at, customer="cus_hopper")
    title = "Renew the subscription of cus_hopper"
    charge = Step.objects.get(run_id=hopper.run_id, step_id="charge")
    operator = user_in("operator")
    client = Client()
    client.force_login(operator)
    pages = {
        "settle": f"/runs/{hopper.run_id}/steps/{charge.pk}/settle/",
        "resume form": f"/runs/{hopper.run_id}/resume/",
        "cancel form": f"/runs/{hopper.run_id}/cancel/",
        "fork form": f"/runs/{hopper.run_id}/fork/?step=fetch_subscription",
        "deploy check": "/deploy/",
        "bulk preview": f"/bulk/?action=cancel&run={hopper.run_id}",
    }
    for name, url in pages.items():
        response = client.get(url)
        html = response.content.decode()
        assert response.status_code == 200, (name, response.status_code)
        assert title in html and hopper.run_id in html, name
    note = "audit title test"
    transitions.run_cancel(run_id=hopper.run_id, by=operator, reason=note, seen_version=None)
    audit = client.get("/audit/").content.decode()
    assert note in audit and title in audit
