"""Approving with the evidence (issue 23, item 4): a settlement's proposed result and a gate's
arguments are shown beside the step's inputs, the lookup's answer and the run's reads; a value
that contradicts what it can be checked against (an amount, a customer, an id) is flagged
before anyone approves it, and approving it needs the approver's acknowledgement — on the page
and again on the server. The queue shows the proposed result and links to the evidence, where
alone it is approved; the settle form's placeholder names this step's own amount."""

from __future__ import annotations

import html as htmllib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from harness.cluster import Cluster
from ledger import transitions
from ledger.models import AuditEvent, Gate, Run, Settlement, Step
from ledger.selectors import evidence
from tests.support.dashboard_runs import (
    evidence_seen,
    lookup_down_run,
    renewal_run,
    signed_in,
    start,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready, settings) -> Iterator[None]:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True
    yield


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


def text(response: Any) -> str:
    return response.content.decode()


def settle_url(step: Step) -> str:
    return f"/runs/{step.run_id}/steps/{step.pk}/settle/"


def propose(client: Client, step: Step, result: str, **extra: Any) -> Any:
    page = text(client.get(settle_url(step)))
    version = re.search(r'name="seen_version" value="(\d+)"', page)
    assert version is not None
    data = {
        "seen_version": version.group(1),
        "outcome": "happened",
        "result": result,
        "reason": "the gateway's statement shows it",
        **extra,
    }
    return client.post(f"{settle_url(step)}propose/", data)


def flag_of(page: str) -> str:
    """The text of the page's evidence warning ("" when there is none)."""
    found = re.search(r'<div class="message warn evidence-flag"[^>]*>(.*?)</div>', page, re.S)
    return htmllib.unescape(re.sub(r"<[^>]+>", "", found.group(1))) if found else ""


# --- the comparison itself --------------------------------------------------------------------


def test_contradictions_compare_amounts_by_size_and_names_and_ids_exactly() -> None:
    inputs = {"customer": "cus_hopper", "amount_cents": 24900, "note": "renewal"}
    sources = [("the step's inputs", inputs)]
    assert (
        evidence.contradictions({"amount_cents": -24900, "customer": "cus_hopper"}, sources) == []
    )
    assert evidence.contradictions({"gateway_ref": "gw_1", "note": "other"}, sources) == []
    [amount, who] = evidence.contradictions(
        {"charge": {"amount_cents": 900}, "customer": "cus_knuth"}, sources
    )
    assert amount.sentence() == "charge.amount_cents is 900 here, but 24900 in the step's inputs"
    assert who.sentence() == "customer is “cus_knuth” here, but “cus_hopper” in the step's inputs"
    # A name held with several values disagrees only when the value is none of them.
    listed = [("the run's reads", {"items": [{"invoice_id": "a"}, {"invoice_id": "b"}]})]
    assert evidence.contradictions({"invoice_id": "b"}, listed) == []
    assert len(evidence.contradictions({"invoice_id": "c"}, listed)) == 1
    # Numbers written as text still compare as amounts; a boolean is not an amount.
    assert evidence.contradictions({"amount_cents": "24900"}, sources) == []
    assert len(evidence.contradictions({"amount_cents": True}, sources)) == 1


# --- a settlement -----------------------------------------------------------------------------


def test_a_result_that_contradicts_the_inputs_is_flagged_and_needs_acknowledging(
    execute, crash_at, broker
) -> None:
    run = renewal_run(execute, crash_at)  # cus_hopper's 24,900 renewal, no lookup
    step = Step.objects.get(run=run, step_id="charge")
    olive = signed_in("operator", "olive")
    wrong = '{"gateway_ref": "gw_x", "amount_cents": 900, "customer": "<b>cus_knuth</b>"}'

    # The proposer is warned first and nothing is written until they tick the box.
    refused = propose(olive, step, wrong)
    assert refused.status_code == 400 and Settlement.objects.count() == 0
    warning = flag_of(text(refused))
    assert "amount_cents is 900 here, but 24900 in the step's inputs" in warning
    assert "customer is “<b>cus_knuth</b>” here, but “cus_hopper”" in warning
    assert "<b>cus_knuth</b>" not in text(refused)  # escaped
    assert propose(olive, step, wrong, acknowledge="on").status_code == 302
    proposal = Settlement.objects.get()

    # The approver sees the result beside the inputs, and the same warning.
    amy = signed_in("approver", "amy")
    page = text(amy.get(settle_url(step)))
    beside = page[page.index('id="proposal-evidence"') :]
    assert beside.index("Proposed result") < beside.index("The step's inputs")
    assert "&quot;amount_cents&quot;: 24900" in beside and "&quot;amount_cents&quot;: 900" in beside
    assert "amount_cents is 900 here, but 24900" in flag_of(page)
    assert 'name="acknowledge" value="on" required' in page

    # Approving without acknowledging is refused on the server, and changes nothing.
    before = (Step.objects.get(pk=step.pk).version, AuditEvent.objects.count())
    seen = evidence_seen(amy, step)
    response = amy.post(
        f"/settlements/{proposal.pk}/approve/", {"reason": "ok", "evidence_seen": seen}
    )
    assert response.status_code == 400
    assert "tick “I checked”" in text(response)
    assert (Step.objects.get(pk=step.pk).version, AuditEvent.objects.count()) == before
    assert Settlement.objects.get().status == "proposed" and broker.published() == []

    response = amy.post(
        f"/settlements/{proposal.pk}/approve/",
        {"reason": "partial", "acknowledge": "on", "evidence_seen": seen},
    )
    assert response.status_code == 302
    assert Step.objects.get(pk=step.pk).status == "succeeded"
    assert Run.objects.get(pk=run.run_id).status == "queued"


def test_a_result_that_agrees_is_said_to_agree_and_approved_without_the_box(
    execute, crash_at
) -> None:
    run = renewal_run(execute, crash_at)
    step = Step.objects.get(run=run, step_id="charge")
    olive = signed_in("operator", "olive")
    right = '{"gateway_ref": "gw_1", "amount_cents": 24900, "customer": "cus_hopper"}'
    assert propose(olive, step, right).status_code == 302
    amy = signed_in("approver", "amy")
    page = text(amy.get(settle_url(step)))
    assert flag_of(page) == "" and 'id="evidence-ok"' in page
    assert 'name="acknowledge"' not in page
    proposal = Settlement.objects.get()
    seen = {"evidence_seen": evidence_seen(amy, step)}
    assert amy.post(f"/settlements/{proposal.pk}/approve/", seen).status_code == 302
    assert Step.objects.get(pk=step.pk).status == "succeeded"


def test_a_result_that_contradicts_the_lookups_answer_is_flagged(
    execute, crash_at, monkeypatch
) -> None:
    run = lookup_down_run(execute, crash_at, monkeypatch)  # inv_1001: cus_ada, 4,200
    step = Step.objects.get(run=run, step_id="refund")
    monkeypatch.delenv("RUNLEDGER_PROVIDER_LOOKUP")  # the provider's lookup is back
    olive = signed_in("operator", "olive")
    olive.post(f"{settle_url(step)}lookup/")
    answer = evidence.last_lookup_answer(step=step)
    assert answer["outcome"] == "happened" and answer["result"]["charge_id"]
    forged = f'{{"charge_id": "{answer["result"]["charge_id"]}x", "amount_cents": -4200}}'
    assert propose(olive, step, forged, acknowledge="on").status_code == 302
    page = text(signed_in("approver", "amy").get(settle_url(step)))
    assert "charge_id is" in flag_of(page) and "in the lookup's answer" in flag_of(page)
    assert "The lookup's answer" in page[page.index('id="proposal-evidence"') :]


def test_the_placeholder_names_this_steps_amount_not_another(execute, crash_at) -> None:
    run = renewal_run(execute, crash_at)
    step = Step.objects.get(run=run, step_id="charge")
    page = text(signed_in("operator", "olive").get(settle_url(step)))
    placeholder = re.search(r'name="result" id="id_result"[^>]* placeholder="([^"]*)"', page)
    assert placeholder is not None
    hint = htmllib.unescape(placeholder.group(1))
    assert '"amount_cents": 24900' in hint and '"customer": "cus_hopper"' in hint
    assert ": 900," not in hint and ": 900}" not in hint


def test_the_queue_shows_the_proposed_result_and_sends_every_approval_to_the_evidence(
    execute, crash_at
) -> None:
    flagged_run = renewal_run(execute, crash_at)
    fine_run = renewal_run(execute, crash_at, customer="cus_lovelace")
    olive = signed_in("operator", "olive")
    flagged = Step.objects.get(run=flagged_run, step_id="charge")
    fine = Step.objects.get(run=fine_run, step_id="charge")
    long_reason = "the statement says so " * 10
    propose(olive, flagged, '{"gateway_ref": "gw_a", "amount_cents": 900}', acknowledge="on")
    propose(olive, fine, '{"gateway_ref": "gw_b", "amount_cents": 24900}', reason=long_reason)
    page = text(signed_in("approver", "amy").get("/settlements/"))
    rows = {
        pk: body
        for pk, body in re.findall(
            r'<tr class="row-needs_attention" id="queue-(\d+)">(.*?)</tr>', page, re.S
        )
    }
    bad, good = rows[str(flagged.pk)], rows[str(fine.pk)]
    assert "&quot;amount_cents&quot;: 900" in bad and "Disagrees with its evidence" in bad
    assert "/approve/" not in bad and "review it with the evidence to approve" in bad
    assert "&quot;gateway_ref&quot;: &quot;gw_b&quot;" in good and "/approve/" not in good
    assert "open the evidence to approve or reject" in good
    assert long_reason.strip() in htmllib.unescape(good)  # the whole reason, not 80 characters
    assert "Disagrees" not in good


# --- an approval gate -------------------------------------------------------------------------


def test_a_gates_arguments_are_shown_beside_the_runs_reads_and_a_contradiction_needs_the_box(
    execute,
) -> None:
    # The requester asked for cus_grace; the invoice the agent read (and pays) is cus_barbara's.
    run = start("payout", {"invoice_id": "inv_1004", "customer": "cus_grace"}, execute.clock)
    assert execute(run.run_id).reason == "approval"
    gate = Gate.objects.get(run=run)
    amy = signed_in("approver", "amy")
    page = text(amy.get(f"/approvals/{gate.pk}/"))
    beside = page[page.index('id="gate-evidence"') :]
    assert "The run's inputs" in beside and "Step fetch_invoice&#x27;s result" in beside
    assert "&quot;total_cents&quot;: 15000" in beside
    assert (
        flag_of(page).count("customer is “cus_barbara” here, but “cus_grace” in the run's inputs")
        == 1
    )
    response = amy.post(f"/approvals/{gate.pk}/approve/", {"reason": "fine"})
    assert response.status_code == 400 and Gate.objects.get(pk=gate.pk).status == "waiting"
    response = amy.post(f"/approvals/{gate.pk}/approve/", {"reason": "fine", "acknowledge": "on"})
    assert response.status_code == 302 and Gate.objects.get(pk=gate.pk).status == "approved"


def test_a_gate_whose_arguments_agree_is_approved_as_before(execute) -> None:
    run = start("payout", {"invoice_id": "inv_1004"}, execute.clock)
    assert execute(run.run_id).reason == "approval"
    gate = Gate.objects.get(run=run)
    amy = signed_in("approver", "amy")
    page = text(amy.get(f"/approvals/{gate.pk}/"))
    assert flag_of(page) == "" and 'id="evidence-ok"' in page
    assert amy.post(f"/approvals/{gate.pk}/approve/", {}).status_code == 302
    assert transitions is not None and Gate.objects.get(pk=gate.pk).status == "approved"
