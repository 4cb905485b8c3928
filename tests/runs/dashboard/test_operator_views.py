"""The dashboard's acting side through Django's test client: settle, approve, stale, run
actions, bulk, audit — permissions, CSRF, bad input, concurrency — on runs the real engine left.

Every test routes this process's enqueues to a broker folder of its own (``broker``) and
asserts the message the views left there after the commit, beside the ledger rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from harness.cluster import Cluster
from ledger import registry
from ledger.examples.models import GatewayCharge, ProviderCharge
from ledger.models import AuditEvent, Run, Settlement, Step
from tests.support.dashboard_runs import (
    budget_run,
    client_for,
    evidence_seen,
    html_run,
    lookup_down_run,
    renewal_run,
    stale_run,
    succeeded_run,
    user_in,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready, settings) -> Iterator[None]:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = True
    yield
    for name in ("markup-agent",):
        registry.unregister_agent(name)


@pytest.fixture(autouse=True)
def broker(tmp_path: Path) -> Iterator[Cluster]:
    """A broker folder of this test's own (no workers): what the views enqueue lands here."""
    cluster = Cluster(tmp_path / "broker")
    with cluster.producing():
        yield cluster


@pytest.fixture
def olive() -> Client:  # an operator
    return client_for(user_in("operator", name="olive"))


@pytest.fixture
def oscar() -> Client:  # another operator
    return client_for(user_in("operator", name="oscar"))


@pytest.fixture
def amy() -> Client:  # an approver
    return client_for(user_in("approver", name="amy"))


@pytest.fixture
def vic() -> Client:  # a viewer
    return client_for(user_in("viewer", name="vic"))


def text(response) -> str:
    return response.content.decode()


def seen_version(html: str, form_id: str | None = None) -> int:
    if form_id is not None:
        html = html[html.index(f'id="{form_id}"') :]
    return int(re.search(r'name="seen_version" value="(\d+)"', html).group(1))


def step_of(run: Run, step_id: str) -> Step:
    return Step.objects.get(run=run, step_id=step_id)


def ledger_state() -> tuple[list[Any], list[Any], int, int]:
    """Everything an action could change: runs, steps, settlements, audit events."""
    runs = list(Run.objects.order_by("run_id").values())
    steps = list(Step.objects.order_by("id").values())
    return runs, steps, Settlement.objects.count(), AuditEvent.objects.count()


def propose(client: Client, step: Step, **fields: Any):
    page = client.get(f"/runs/{step.run_id}/steps/{step.pk}/settle/")
    data = {"seen_version": seen_version(text(page)), **fields}
    return client.post(f"/runs/{step.run_id}/steps/{step.pk}/settle/propose/", data)


# --- the queue ---------------------------------------------------------------------------


def test_the_queue_lists_waiting_effects_oldest_first_with_read_path_and_proposal(
    execute, crash_at, monkeypatch, olive, amy, clock
) -> None:
    renewal = renewal_run(execute, crash_at)
    clock.advance(60)
    refund = lookup_down_run(execute, crash_at, monkeypatch)
    page = text(olive.get("/settlements/"))
    rows = re.findall(r'<tr class="row-needs_attention" id="queue-(\d+)">', page)
    charge, pay = step_of(renewal, "charge"), step_of(refund, "refund")
    assert rows == [str(charge.pk), str(pay.pk)]  # oldest first
    first = page[page.index(f'id="queue-{charge.pk}"') : page.index(f'id="queue-{pay.pk}"')]
    assert renewal.run_id in first and "renewal" in first and "charge_card_legacy" in first
    assert charge.effect_key in first.replace("<wbr>", "") and "no lookup" in first
    assert "has a lookup" in page[page.index(f'id="queue-{pay.pk}"') :]

    propose(olive, charge, outcome="abandon", reason="customer cancelled by phone")
    page = text(amy.get("/settlements/"))
    row = page[page.index(f'id="queue-{charge.pk}"') : page.index(f'id="queue-{pay.pk}"')]
    assert "abandon" in row and "by olive" in row
    # Approving is done beside the evidence (issue 35): the queue links there, no inline form.
    assert "open the evidence to approve or reject" in row and "/approve/" not in row
    assert "open the evidence to approve" not in text(olive.get("/settlements/"))  # an operator


# --- settling: propose, approve --------------------------------------------------------------


def test_it_happened_is_proposed_by_an_operator_and_approved_by_an_approver(
    execute, crash_at, olive, amy, broker
) -> None:
    run = renewal_run(execute, crash_at)
    step = step_of(run, "charge")
    [charge] = GatewayCharge.objects.filter(customer="cus_hopper")
    result = f'{{"gateway_ref": "{charge.gateway_ref}", "amount_cents": 24900}}'

    response = propose(olive, step, outcome="happened", result=result, reason="on the statement")
    assert response.status_code == 302
    assert response.url == f"/runs/{run.run_id}/steps/{step.pk}/settle/"
    assert step_of(run, "charge").status == "started"  # a proposal changes no ledger row
    assert broker.published() == []
    page = text(olive.get(response.url))
    assert "waits for a different person" in page and "Waiting for approval" in page
    assert "Approve and resume" not in page  # an operator cannot approve

    # The operator's role cannot approve on the server either.
    proposal = Settlement.objects.get()
    assert olive.post(f"/settlements/{proposal.pk}/approve/", {}).status_code == 403

    page = text(amy.get(f"/runs/{run.run_id}/steps/{step.pk}/settle/"))
    assert "Approve and resume the run" in page and charge.gateway_ref in page
    seen = evidence_seen(amy, step)
    response = amy.post(
        f"/settlements/{proposal.pk}/approve/", {"reason": "matches", "evidence_seen": seen}
    )
    assert response.status_code == 302 and response.url == f"/runs/{run.run_id}/"

    settled = step_of(run, "charge")
    assert settled.status == "succeeded" and settled.settled_by == "olive, approved by amy"
    assert settled.result == {"gateway_ref": charge.gateway_ref, "amount_cents": 24900}
    run.refresh_from_db()
    assert run.status == "queued"
    assert broker.published() == [("runledger.resume_run", [run.run_id])]
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor"))
    assert actions == [("settlement_propose", "olive"), ("settlement_approve", "amy")]
    page = text(amy.get(response.url))
    assert "Approved olive" in page and "a worker resumes it now" in page
    assert 'id="run-audit"' in page and "settlement_approve" in page


def test_with_approval_off_the_operator_settles_at_once(
    execute, crash_at, olive, settings, broker
) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = False
    run = renewal_run(execute, crash_at, point="gateway.before_effect")
    step = step_of(run, "charge")
    response = propose(olive, step, outcome="not_happened", reason="not in the gateway's log")
    assert response.status_code == 302 and response.url == f"/runs/{run.run_id}/"
    settled = step_of(run, "charge")
    assert (settled.status, settled.effect_key, settled.settled_by) == (
        "pending",
        step.effect_key,
        "olive",
    )
    assert broker.published() == [("runledger.resume_run", [run.run_id])]
    # The resume sends the charge again under the same key: attempt 2, one charge.
    assert execute(run.run_id).status == "succeeded"
    again = step_of(run, "charge")
    assert (again.attempt, again.effect_key) == (2, step.effect_key)
    assert list(GatewayCharge.objects.values_list("reference", flat=True)) == [step.effect_key]


def test_the_proposer_cannot_approve_their_own_settlement(execute, crash_at) -> None:
    admin = client_for(user_in("admin", name="ada"))  # holds every permission
    run = renewal_run(execute, crash_at)
    step = step_of(run, "charge")
    propose(admin, step, outcome="abandon", reason="duplicate subscription")
    proposal = Settlement.objects.get()
    page = text(admin.get(f"/runs/{run.run_id}/steps/{step.pk}/settle/"))
    assert "You proposed this: a different person must approve it." in page
    before = ledger_state()
    seen = evidence_seen(admin, step)
    response = admin.post(
        f"/settlements/{proposal.pk}/approve/", {"reason": "me", "evidence_seen": seen}
    )
    assert response.status_code == 409
    assert "a different person must approve" in text(response)
    assert "Nothing was changed." in text(response)
    assert ledger_state() == before


def test_an_approver_rejects_and_the_proposer_withdraws(execute, crash_at, olive, oscar, amy):
    run = renewal_run(execute, crash_at)
    step = step_of(run, "charge")
    propose(olive, step, outcome="abandon", reason="maybe")
    first = Settlement.objects.get()
    assert amy.post(f"/settlements/{first.pk}/reject/", {"reason": ""}).status_code == 400
    assert oscar.post(f"/settlements/{first.pk}/reject/", {"reason": "no"}).status_code == 403
    response = amy.post(f"/settlements/{first.pk}/reject/", {"reason": "we have no evidence"})
    assert response.status_code == 302
    first.refresh_from_db()
    assert first.status == "rejected" and first.decided_by_name == "amy"

    propose(olive, step, outcome="abandon", reason="second thoughts")
    second = Settlement.objects.get(status="proposed")
    response = olive.post(f"/settlements/{second.pk}/reject/", {"reason": "withdrawn"})
    assert response.status_code == 302
    second.refresh_from_db()
    assert (second.status, second.decided_by_name) == ("rejected", "olive")
    assert step_of(run, "charge").status == "started"


# --- bad input ---------------------------------------------------------------------------


def test_bad_results_and_missing_reasons_show_the_form_again_and_save_nothing(
    execute, crash_at, olive, settings
) -> None:
    settings.RUNLEDGER_MAX_SETTLEMENT_RESULT_BYTES = 200
    run = renewal_run(execute, crash_at)
    step = step_of(run, "charge")
    before = ledger_state()

    response = propose(olive, step, outcome="happened", result='{"gateway_ref": gw_1', reason="x")
    assert response.status_code == 400
    page = text(response)
    assert "the result is not valid JSON" in page and "line 1, column 17" in page
    assert "{&quot;gateway_ref&quot;: gw_1</textarea>" in page  # what was typed, kept

    big = '{"note": "' + "x" * 300 + '"}'
    response = propose(olive, step, outcome="happened", result=big, reason="x")
    assert response.status_code == 400 and "the limit is 200 bytes" in text(response)

    response = propose(olive, step, outcome="happened", result="", reason="x")
    assert response.status_code == 400 and "enter the downstream system" in text(response)

    response = propose(olive, step, outcome="happened", result='{"ok": 1}', reason="  ")
    assert response.status_code == 400 and "This field is required" in text(response)

    response = propose(olive, step, outcome="abandon", result='{"ok": 1}', reason="r")
    assert response.status_code == 400 and "only “it happened” carries a result" in text(response)

    response = propose(olive, step, outcome="maybe", reason="r")
    assert response.status_code == 400
    assert ledger_state() == before


def test_settling_a_step_that_needs_no_settling_is_refused_with_a_message(execute, olive) -> None:
    run = succeeded_run(execute)
    step = step_of(run, "refund")  # a succeeded effect
    page = text(olive.get(f"/runs/{run.run_id}/steps/{step.pk}/settle/"))
    assert "Nothing to settle" in page and 'id="settle-form"' not in page
    before = ledger_state()
    response = olive.post(
        f"/runs/{run.run_id}/steps/{step.pk}/settle/propose/",
        {"seen_version": step.version, "outcome": "abandon", "reason": "r"},
    )
    assert response.status_code == 409
    assert "only a started effect" in text(response)
    assert ledger_state() == before


def test_unknown_steps_and_settlements_are_404(execute, crash_at, olive, amy) -> None:
    run = renewal_run(execute, crash_at)
    other = succeeded_run(execute)
    step = step_of(run, "charge")
    assert olive.get(f"/runs/{other.run_id}/steps/{step.pk}/settle/").status_code == 404
    assert olive.get(f"/runs/{run.run_id}/steps/999999/stale/").status_code == 404
    assert amy.post("/settlements/999999/approve/", {}).status_code == 404


# --- concurrency -----------------------------------------------------------------------------


def test_two_operators_settling_the_same_step_one_wins_the_other_sees_the_current_state(
    execute, crash_at, olive, oscar, settings
) -> None:
    settings.RUNLEDGER_SETTLEMENT_APPROVAL = False
    run = renewal_run(execute, crash_at)
    step = step_of(run, "charge")
    url = f"/runs/{run.run_id}/steps/{step.pk}/settle/"
    seen_by_olive = seen_version(text(olive.get(url)))
    seen_by_oscar = seen_version(text(oscar.get(url)))
    assert seen_by_olive == seen_by_oscar == step.version

    won = olive.post(
        url + "propose/",
        {"seen_version": seen_by_olive, "outcome": "abandon", "reason": "customer left"},
    )
    assert won.status_code == 302
    after_first = ledger_state()

    lost = oscar.post(
        url + "propose/",
        {"seen_version": seen_by_oscar, "outcome": "not_happened", "reason": "retry it"},
    )
    assert lost.status_code == 409
    page = text(lost)
    assert "This step changed since you opened it" in page
    assert "Nothing was changed." in page
    assert "&quot;status&quot;: &quot;abandoned&quot;" in page  # its current state
    assert "Nothing to settle" in page  # the page as it is now: no form left to send
    assert ledger_state() == after_first
    assert step_of(run, "charge").settled_by == "olive"


def test_a_second_proposal_while_one_waits_is_refused(execute, crash_at, olive, oscar) -> None:
    run = renewal_run(execute, crash_at)
    step = step_of(run, "charge")
    propose(olive, step, outcome="abandon", reason="first")
    before = ledger_state()
    response = oscar.post(
        f"/runs/{run.run_id}/steps/{step.pk}/settle/propose/",
        {"seen_version": step.version, "outcome": "not_happened", "reason": "second"},
    )
    assert response.status_code == 409
    assert "Olive already proposed &#x27;abandon&#x27; for this step" in text(response)
    assert ledger_state() == before


def test_approving_twice_is_refused_the_second_time(execute, crash_at, olive, amy, broker):
    run = renewal_run(execute, crash_at, point="gateway.before_effect")
    step = step_of(run, "charge")
    propose(olive, step, outcome="not_happened", reason="absent from the gateway log")
    proposal = Settlement.objects.get()
    other = client_for(user_in("approver", name="abe"))
    seen = {"evidence_seen": evidence_seen(amy, step)}
    assert amy.post(f"/settlements/{proposal.pk}/approve/", seen).status_code == 302
    after = ledger_state()
    response = other.post(f"/settlements/{proposal.pk}/approve/", {})
    assert response.status_code == 409 and "already applied by amy" in text(response)
    assert ledger_state() == after
    assert broker.published() == [("runledger.resume_run", [run.run_id])]


# --- look it up again ------------------------------------------------------------------------


def test_look_it_up_again_records_the_answer_and_leaves_the_step(
    execute, crash_at, monkeypatch, olive
) -> None:
    run = lookup_down_run(execute, crash_at, monkeypatch)
    step = step_of(run, "refund")
    url = f"/runs/{run.run_id}/steps/{step.pk}/settle/lookup/"
    response = olive.post(url, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert '<b class="lookup-outcome">unknown</b>' in text(response)
    monkeypatch.delenv("RUNLEDGER_PROVIDER_LOOKUP")
    response = olive.post(url)  # without htmx: the whole page
    page = text(response)
    assert '<b class="lookup-outcome">happened</b>' in page
    assert ProviderCharge.objects.get().charge_id in page
    events = AuditEvent.objects.filter(action="reconcile_lookup").order_by("id")
    assert [e.after["outcome"] for e in events] == ["unknown", "happened"]
    assert step_of(run, "refund").status == "started" and step_of(run, "refund").version == (
        step.version
    )


def test_look_it_up_again_on_a_tool_without_a_read_path_is_refused(
    execute, crash_at, olive
) -> None:
    run = renewal_run(execute, crash_at)
    step = step_of(run, "charge")
    page = text(olive.get(f"/runs/{run.run_id}/steps/{step.pk}/settle/"))
    assert "Look it up again" not in page and "has no read path" in page
    response = olive.post(f"/runs/{run.run_id}/steps/{step.pk}/settle/lookup/")
    assert response.status_code == 409 and "has no read path" in text(response)
    assert AuditEvent.objects.count() == 0


# --- permissions, CSRF, reading writes nothing ------------------------------------------------


def pages(run: Run, blocked: Step, stale: Step) -> list[str]:
    return [
        f"/runs/{run.run_id}/steps/{blocked.pk}/settle/",
        f"/runs/{stale.run_id}/steps/{stale.pk}/stale/",
        f"/runs/{run.run_id}/resume/",
        f"/runs/{run.run_id}/retry/",
        f"/runs/{run.run_id}/cancel/",
        f"/runs/{run.run_id}/fork/?step=fetch_subscription",
        f"/bulk/?action=resume&scope=selection&run={run.run_id}",
        "/bulk/?action=cancel&scope=filter&status=needs_attention",
    ]


def posts(run: Run, blocked: Step, stale: Step, proposal: Settlement) -> list[tuple[str, dict]]:
    reason = {"reason": "r"}
    return [
        (f"/runs/{run.run_id}/steps/{blocked.pk}/settle/propose/",
         {"seen_version": blocked.version, "outcome": "abandon", **reason}),
        (f"/runs/{run.run_id}/steps/{blocked.pk}/settle/lookup/", {}),
        (f"/settlements/{proposal.pk}/approve/", reason),
        (f"/settlements/{proposal.pk}/reject/", reason),
        (f"/runs/{stale.run_id}/steps/{stale.pk}/stale/accept/",
         {"seen_version": stale.version, **reason}),
        (f"/runs/{stale.run_id}/steps/{stale.pk}/stale/reexecute/",
         {"seen_version": stale.version, **reason}),
        (f"/runs/{run.run_id}/resume/", {"seen_version": run.version, **reason}),
        (f"/runs/{run.run_id}/retry/", {"seen_version": run.version, **reason}),
        (f"/runs/{run.run_id}/cancel/", {"seen_version": run.version, **reason}),
        (f"/runs/{run.run_id}/fork/", {"step_id": "fetch_subscription", **reason}),
        ("/bulk/apply/", {"action": "cancel", "target": f"{run.run_id}:{run.version}", **reason}),
    ]  # fmt: skip


@pytest.fixture
def scene(execute, crash_at, monkeypatch) -> tuple[Run, Step, Step, Settlement]:
    """A blocked renewal with a waiting proposal, and a run stopped on a stale step."""
    run = renewal_run(execute, crash_at)
    blocked = step_of(run, "charge")
    other = renewal_run(execute, crash_at, customer="cus_knuth")
    client_for(user_in("operator", name="opal")).post(
        f"/runs/{other.run_id}/steps/{step_of(other, 'charge').pk}/settle/propose/",
        {"seen_version": 1, "outcome": "abandon", "reason": "duplicate"},
    )
    stale = step_of(stale_run(execute, crash_at, monkeypatch), "decide")
    return run, blocked, stale, Settlement.objects.get()


def test_opening_every_page_and_form_writes_nothing(scene, olive, amy, vic) -> None:
    run, blocked, stale, _ = scene
    before = ledger_state()
    for client in (olive, amy):
        for url in [
            *pages(run, blocked, stale),
            "/settlements/",
            "/audit/",
            f"/runs/{run.run_id}/",
        ]:
            response = client.get(url)
            assert response.status_code in (200, 403), url
    for url in ("/settlements/", "/audit/", f"/runs/{run.run_id}/"):
        assert vic.get(url).status_code == 200
    assert ledger_state() == before  # no audit event, no ledger change, from reading
    assert AuditEvent.objects.count() == 1  # opal's proposal, made before


def test_a_viewer_is_refused_every_operator_page_and_every_action(scene, vic, broker) -> None:
    run, blocked, stale, proposal = scene
    before = ledger_state()
    for url in pages(run, blocked, stale):
        response = vic.get(url)
        assert response.status_code == 403, url
        assert "Not allowed" in text(response)
    for url, data in posts(run, blocked, stale, proposal):
        assert vic.post(url, data).status_code == 403, url
    assert ledger_state() == before and broker.published() == []
    # The read pages show no action to a viewer.
    page = text(vic.get(f"/runs/{run.run_id}/"))
    assert 'id="run-actions"' not in page and "settle/" not in page
    listing = text(vic.get("/"))
    assert 'id="bulk-form"' not in listing and "data-pick" not in listing


def test_an_approver_cannot_act_as_an_operator(scene, amy) -> None:
    run, blocked, stale, proposal = scene
    before = ledger_state()
    operator_only = [p for p in posts(run, blocked, stale, proposal) if "/settlements/" not in p[0]]
    for url, data in operator_only:
        if url.endswith("/lookup/"):
            continue  # an approver may ask the lookup (evidence); this tool has none: 409
        assert amy.post(url, data).status_code == 403, url
    assert ledger_state() == before


def test_every_post_without_a_csrf_token_is_refused(scene, broker) -> None:
    run, blocked, stale, proposal = scene
    admin = client_for(user_in("admin", name="root"), csrf=True)
    before = ledger_state()
    for url, data in posts(run, blocked, stale, proposal):
        response = admin.post(url, data)
        assert response.status_code == 403, url
        assert "CSRF" in text(response)
    assert ledger_state() == before and broker.published() == []


def test_a_stranger_is_sent_to_sign_in(scene) -> None:
    run, blocked, stale, proposal = scene
    for url, data in posts(run, blocked, stale, proposal):
        response = Client().post(url, data)
        assert response.status_code == 302 and response.url.startswith("/accounts/login/"), url


def test_values_from_a_run_are_escaped_on_the_settle_page(execute, crash_at, olive) -> None:
    run = html_run(execute, crash_at)
    step = Step.objects.get(run=run, kind="effect")
    page = text(olive.get(f"/runs/{run.run_id}/steps/{step.pk}/settle/"))
    assert "<img src=x onerror" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<i>effect</i>" not in page


# --- stale steps --------------------------------------------------------------------------------


def test_accepting_a_stale_result_shows_the_preview_first_then_queues_the_run(
    execute, crash_at, monkeypatch, olive, broker
) -> None:
    run = stale_run(execute, crash_at, monkeypatch)
    decide = step_of(run, "decide")
    page = text(olive.get(f"/runs/{run.run_id}/steps/{decide.pk}/stale/"))
    assert "Preview of a resume" in page and "nothing was executed or written" in page
    assert 'class="d-add"' in page and "good standing" in page
    assert "Would run again" in page and "email_customer" in page
    version = seen_version(page, "accept-form")

    response = olive.post(
        f"/runs/{run.run_id}/steps/{decide.pk}/stale/accept/",
        {"seen_version": version, "reason": "same facts, reworded prompt"},
    )
    assert response.status_code == 302
    accepted = step_of(run, "decide")
    assert accepted.input_hash != decide.input_hash and accepted.result == decide.result
    run.refresh_from_db()
    assert run.status == "queued"
    assert broker.published() == [("runledger.resume_run", [run.run_id])]
    assert AuditEvent.objects.get().action == "stale_accept"

    # The same form sent again (the step is no longer stale) changes nothing.
    before = ledger_state()
    again = olive.post(
        f"/runs/{run.run_id}/steps/{decide.pk}/stale/accept/",
        {"seen_version": version, "reason": "twice"},
    )
    assert again.status_code == 409
    assert "Step &#x27;decide&#x27; is not stale" in text(again)
    assert ledger_state() == before


def test_reexecuting_from_a_stale_step_resets_it_and_keeps_effect_rows(
    execute, crash_at, monkeypatch, olive, broker
) -> None:
    run = stale_run(execute, crash_at, monkeypatch)
    decide = step_of(run, "decide")
    refund_before = step_of(run, "refund")
    page = text(olive.get(f"/runs/{run.run_id}/steps/{decide.pk}/stale/"))
    response = olive.post(
        f"/runs/{run.run_id}/steps/{decide.pk}/stale/reexecute/",
        {"seen_version": seen_version(page, "reexecute-form"), "reason": "ask the new prompt"},
    )
    assert response.status_code == 302
    assert step_of(run, "decide").status == "pending"
    refund = step_of(run, "refund")
    assert (refund.status, refund.effect_key) == ("succeeded", refund_before.effect_key)
    assert broker.published() == [("runledger.resume_run", [run.run_id])]
    assert "back to pending" in text(olive.get(response.url))


def test_a_step_that_is_not_stale_is_refused_with_a_message(execute, olive) -> None:
    run = succeeded_run(execute)
    fetch = step_of(run, "fetch_invoice")
    before = ledger_state()
    response = olive.post(
        f"/runs/{run.run_id}/steps/{fetch.pk}/stale/accept/",
        {"seen_version": fetch.version, "reason": "r"},
    )
    assert response.status_code == 409 and "is not stale" in text(response)
    assert ledger_state() == before


# --- run actions -------------------------------------------------------------------------------


def test_resuming_a_run_stopped_at_its_budget_with_a_raised_budget(
    execute, crash_at, olive, broker
) -> None:
    run = budget_run(execute, crash_at)
    page = text(olive.get(f"/runs/{run.run_id}/resume/"))
    assert "Preview of a resume" in page and "0 / 0" in page
    response = olive.post(
        f"/runs/{run.run_id}/resume/",
        {"seen_version": seen_version(page), "reason": "transient outage", "max_resumes": "3"},
    )
    assert response.status_code == 302
    run.refresh_from_db()
    assert (run.status, run.max_resumes) == ("queued", 3)
    assert broker.published() == [("runledger.resume_run", [run.run_id])]
    assert execute(run.run_id).status == "succeeded"


def test_actions_on_runs_in_states_that_do_not_allow_them_change_nothing(
    execute, crash_at, olive, broker
) -> None:
    done = succeeded_run(execute)
    blocked = budget_run(execute, crash_at)
    before = ledger_state()
    for action, run, words in (
        ("resume", done, "is succeeded; resume applies to a run that is needs attention or failed"),
        ("retry", blocked, "retry applies to a run that is failed"),
        ("cancel", done, "already succeeded"),
    ):
        response = olive.post(
            f"/runs/{run.run_id}/{action}/", {"seen_version": run.version, "reason": "r"}
        )
        assert response.status_code == 409, action
        assert words in text(response), action
        assert "Nothing was changed." in text(response)
    response = olive.post(
        f"/runs/{done.run_id}/resume/",
        {"seen_version": done.version, "reason": "r", "max_resumes": "-1"},
    )
    assert response.status_code == 400
    assert ledger_state() == before and broker.published() == []


def test_an_action_on_a_run_that_moved_since_the_form_opened_is_refused(
    execute, crash_at, olive, oscar
) -> None:
    run = budget_run(execute, crash_at)
    page = text(olive.get(f"/runs/{run.run_id}/cancel/"))
    version = seen_version(page)
    resumed = oscar.post(
        f"/runs/{run.run_id}/resume/",
        {"seen_version": version, "reason": "go", "max_resumes": "2"},
    )
    assert resumed.status_code == 302
    before = ledger_state()
    response = olive.post(f"/runs/{run.run_id}/cancel/", {"seen_version": version, "reason": "x"})
    assert response.status_code == 409
    page = text(response)
    assert "This run changed since you opened it" in page and "now queued" in page
    assert ledger_state() == before
    assert seen_version(page) == Run.objects.get(pk=run.run_id).version  # decide again on it


def test_cancel_is_final_and_audited(execute, crash_at, olive) -> None:
    run = renewal_run(execute, crash_at)
    response = olive.post(
        f"/runs/{run.run_id}/cancel/", {"seen_version": run.version, "reason": "fraud"}
    )
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "cancelled" and "cancelled by olive: fraud" in run.detail
    event = AuditEvent.objects.get()
    assert (event.action, event.actor, event.reason) == ("run_cancel", "olive", "fraud")
    page = text(olive.get(f"/runs/{run.run_id}/"))
    assert "Cancel…" not in page and "run_cancel" in page


def test_forking_from_a_step_starts_a_linked_run(execute, olive, broker) -> None:
    run = succeeded_run(execute)
    page = text(olive.get(f"/runs/{run.run_id}/fork/?step=decide"))
    assert "rows will be copied" in page or "row will be copied" in page
    response = olive.post(
        f"/runs/{run.run_id}/fork/",
        {"step_id": "decide", "reason": "try", "resend_count": "3", "confirm": "send 3 again"},
    )
    assert response.status_code == 302
    fork = Run.objects.get(parent=run)
    assert response.url == f"/runs/{fork.run_id}/"
    assert (fork.parent_kind, fork.forked_from_step_id, fork.status) == ("fork", "decide", "queued")
    copied = list(Step.objects.filter(run=fork).order_by("seq").values_list("step_id", flat=True))
    assert copied == ["fetch_invoice", "decided_at", "decide"]
    assert broker.published() == [("runledger.start_run", [fork.run_id])]
    bad = olive.post(f"/runs/{run.run_id}/fork/", {"step_id": "nope", "reason": "try"})
    assert bad.status_code == 409 and "has no step &#x27;nope&#x27;" in text(bad)
    assert Run.objects.filter(parent=run).count() == 1


# --- bulk ---------------------------------------------------------------------------------------


def test_bulk_resume_by_selection_previews_then_reports_each_run(
    execute, crash_at, olive, oscar, broker
) -> None:
    a, b = budget_run(execute, crash_at), budget_run(execute, crash_at)
    done = succeeded_run(execute)
    before = ledger_state()
    url = f"/bulk/?action=resume&max_resumes=2&scope=selection&run={a.run_id}&run={b.run_id}"
    page = text(olive.get(url + f"&run={done.run_id}"))
    assert ledger_state() == before  # the preview writes nothing
    assert '<b id="will-count">2</b> of 3 runs' in page
    assert "budget 0 → 2" in page and "skip: succeeded" in page
    targets = re.findall(r'name="target" value="([^"]+)"', page)
    assert sorted(targets) == sorted([f"{a.run_id}:{a.version}", f"{b.run_id}:{b.version}"])

    # Between the preview and the confirmation, someone cancels b.
    oscar.post(f"/runs/{b.run_id}/cancel/", {"seen_version": b.version, "reason": "gone"})
    response = olive.post(
        "/bulk/apply/",
        {"action": "resume", "max_resumes": "2", "target": targets, "reason": "outage over"},
    )
    page = text(response)
    assert response.status_code == 200
    assert '<b id="done-count">1</b> done, <b id="refused-count">1</b> refused' in page
    assert "this run changed since you opened it" in page
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.status, a.max_resumes, b.status) == ("queued", 2, "cancelled")
    assert broker.published() == [("runledger.resume_run", [a.run_id])]


def test_bulk_cancel_by_the_current_filter(execute, crash_at, olive) -> None:
    blocked = [budget_run(execute, crash_at), renewal_run(execute, crash_at)]
    done = succeeded_run(execute)
    listing = text(olive.get("/?status=needs_attention"))
    assert 'id="bulk-form"' in listing
    assert '<input type="hidden" form="bulk-form" name="status" value="needs_attention">' in listing
    page = text(olive.get("/bulk/?action=cancel&scope=filter&status=needs_attention"))
    assert "Filter: status = needs_attention" in page and done.run_id not in page
    targets = re.findall(r'name="target" value="([^"]+)"', page)
    assert len(targets) == 2
    response = olive.post("/bulk/apply/", {"action": "cancel", "target": targets, "reason": "x"})
    assert '<b id="done-count">2</b> done' in text(response)
    assert {r.status for r in Run.objects.filter(pk__in=[r.run_id for r in blocked])} == {
        "cancelled"
    }
    assert Run.objects.get(pk=done.run_id).status == "succeeded"


def test_bulk_with_nothing_selected_or_a_bad_action_is_a_message(olive) -> None:
    response = olive.get("/bulk/?action=resume&scope=selection")
    assert response.status_code == 400 and "Select runs in the list first" in text(response)
    response = olive.get("/bulk/?action=explode&scope=selection&run=x")
    assert response.status_code == 400 and "Choose an action" in text(response)
    response = olive.post("/bulk/apply/", {"action": "cancel", "reason": "x"})
    assert response.status_code == 400 and "No runs to act on" in text(response)


# --- audit --------------------------------------------------------------------------------------


def test_the_audit_page_filters_by_run_actor_action_and_date_and_pages_by_keyset(
    execute, crash_at, olive, oscar, monkeypatch
) -> None:
    first, second = budget_run(execute, crash_at), budget_run(execute, crash_at)
    for client, run in ((olive, first), (oscar, second)):
        client.post(f"/runs/{run.run_id}/cancel/", {"seen_version": run.version, "reason": "x"})
    renewal = renewal_run(execute, crash_at)
    propose(olive, step_of(renewal, "charge"), outcome="abandon", reason="dup")

    def rows(query: str) -> list[str]:
        return re.findall(
            r'<span class="badge act">(\w+)</span>', text(olive.get("/audit/" + query))
        )

    assert rows("") == ["settlement_propose", "run_cancel", "run_cancel"]
    assert rows(f"?run={second.run_id}") == ["run_cancel"]
    assert rows("?actor=olive") == ["settlement_propose", "run_cancel"]
    assert rows("?action=run_cancel&actor=oscar") == ["run_cancel"]
    today = AuditEvent.objects.first().at.date().isoformat()
    assert len(rows(f"?since={today}&until={today}")) == 3
    assert rows("?until=2000-01-01") == []
    page = text(olive.get("/audit/?since=yesterday"))
    assert "Ignored from" in page and page.count('class="badge act"') == 3

    monkeypatch.setattr("runs.dashboard.views.audit.AUDIT_PAGE", 1)
    page = text(olive.get("/audit/?actor=olive&action="))
    assert re.findall(r'<span class="badge act">(\w+)</span>', page) == ["settlement_propose"]
    older = re.search(r'href="\?([^"]+)" rel="next"', page).group(1).replace("&amp;", "&")
    last = text(olive.get("/audit/?" + older))
    assert re.findall(r'<span class="badge act">(\w+)</span>', last) == ["run_cancel"]
    assert 'rel="next"' not in last and "Newest" in last


# --- the run page follows a run live ----------------------------------------------------------


def test_the_run_page_polls_while_the_run_is_queued_and_stops_when_it_ends(
    execute, crash_at, olive
) -> None:
    run = budget_run(execute, crash_at)
    olive.post(
        f"/runs/{run.run_id}/resume/",
        {"seen_version": run.version, "reason": "go", "max_resumes": "1"},
    )
    page = text(olive.get(f"/runs/{run.run_id}/"))
    assert re.search(r'id="run-header"[^>]*data-poll', page)
    assert re.search(r'id="step-table"[^>]*hx-trigger="run-changed from:body"', page)
    execute(run.run_id)
    page = text(olive.get(f"/runs/{run.run_id}/steps/", HTTP_HX_REQUEST="true"))
    assert "data-poll" not in page and "succeeded" in page
    header = text(olive.get(f"/runs/{run.run_id}/header/", HTTP_HX_REQUEST="true"))
    assert "data-poll" not in header and "succeeded" in header
