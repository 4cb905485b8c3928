"""The Django admin for the ledger, driven through Django's test client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.urls import reverse

from ledger import selectors, transitions
from ledger.models import AuditEvent, Run, Settlement, Step
from tests.support.operator_agents import step_of

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def admin_client_for(client, django_user_model):
    def login(username: str = "root", *, superuser: bool = True, perms: tuple[str, ...] = ()):
        if superuser:
            user = django_user_model.objects.create_superuser(username=username, password=None)
        else:
            user = django_user_model.objects.create_user(username=username, is_staff=True)
            for codename in perms:
                user.user_permissions.add(Permission.objects.get(codename=codename))
        client.force_login(user)
        return client

    return login


@pytest.fixture
def stopped_refund(execute) -> Run:
    run = transitions.run_start(agent="refund", inputs={"invoice_id": "inv_1001"})
    execute(run.run_id)
    Run.objects.filter(pk=run.pk).update(status="failed", lease_owner="worker-9")
    run.refresh_from_db()
    return run


def step_form(step: Step, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "status": step.status,
        "result": json.dumps(step.result),
        "next_step_id": step.next_step_id or "",
        "effect_key": step.effect_key or "",
        "error": step.error,
        "attempt": step.attempt,
        "expires_at_0": "",
        "expires_at_1": "",
        "seen_version": step.version,
        "change_reason": "",
        "_save": "Save",
    }
    data.update(changes)
    return data


def change_url(obj: Any) -> str:
    # The admin quotes primary keys in its URLs ("_40" would otherwise read as "@"), as its
    # own links do: run ids such as run_40ab... must still open.
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[quote(obj.pk)])


def test_the_admin_lists_searches_and_shows_rows_readably_and_writes_nothing(
    admin_client_for, stopped_refund
) -> None:
    client = admin_client_for()
    run = stopped_refund
    step = step_of(run, "fetch_invoice")
    pages = [
        reverse("admin:ledger_run_changelist") + f"?q={run.run_id}&status__exact=failed",
        reverse("admin:ledger_step_changelist") + f"?run__run_id__exact={run.run_id}&kind=read",
        reverse("admin:ledger_step_changelist") + f"?q={run.run_id}",
        reverse("admin:ledger_settlement_changelist"),
        reverse("admin:ledger_auditevent_changelist") + "?action__exact=run_cancel",
        change_url(run),
        change_url(step),
    ]
    for url in pages:
        assert client.get(url).status_code == 200, url
    page = client.get(change_url(step)).content.decode()
    assert "&quot;customer&quot;: &quot;cus_ada&quot;" in page  # indented JSON in the edit box
    assert "\n  &quot;invoice_id&quot;: &quot;inv_1001&quot;" in page
    assert "change_reason" in page
    run_page = client.get(change_url(run)).content.decode()
    assert "worker-9" in run_page and "Worker lease" in run_page
    listing = client.get(reverse("admin:ledger_step_changelist") + f"?q={run.run_id}")
    assert listing.content.decode().count("fetch_invoice") >= 1
    assert not AuditEvent.objects.exists()


def test_an_admin_edit_needs_a_reason_and_is_audited_with_before_and_after(
    admin_client_for, stopped_refund
) -> None:
    client = admin_client_for()
    step = step_of(stopped_refund, "fetch_invoice")
    edited = dict(step.result, customer="cus_merged")
    response = client.post(change_url(step), step_form(step, result=json.dumps(edited)))
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert step_of(stopped_refund, "fetch_invoice").result == step.result
    assert not AuditEvent.objects.exists()

    response = client.post(
        change_url(step),
        step_form(step, result=json.dumps(edited), change_reason="customer accounts merged"),
    )
    assert response.status_code == 302
    row = step_of(stopped_refund, "fetch_invoice")
    assert (row.result, row.version, row.settled_by) == (
        edited,
        step.version + 1,
        "admin edit by root",
    )
    event = AuditEvent.objects.get()
    assert (event.actor, event.action, event.reason) == (
        "root",
        "step_admin_edit",
        "customer accounts merged",
    )
    assert event.before == {"result": step.result}
    assert event.after["result"] == edited
    assert "decide" in selectors.edited_upstream(run_id=stopped_refund.run_id)


def test_an_admin_edit_of_a_row_that_moved_is_refused(admin_client_for, stopped_refund) -> None:
    client = admin_client_for()
    step = step_of(stopped_refund, "decide")
    transitions.step_admin_edit(
        step=step,
        by="someone",
        reason="first",
        changes={"error": "note"},
        seen_version=step.version,
    )
    response = client.post(
        change_url(step),
        step_form(step, error="", attempt=7, change_reason="second"),
        follow=True,
    )
    assert "Not saved: this step changed since you opened it" in response.content.decode()
    row = step_of(stopped_refund, "decide")
    assert (row.attempt, row.error) == (1, "note")
    assert AuditEvent.objects.count() == 1


def test_a_run_edit_goes_through_the_ledger_and_refuses_running(
    admin_client_for, stopped_refund
) -> None:
    client = admin_client_for()
    run = stopped_refund
    data = {
        "status": "running",
        "reason": "",
        "blocked_step_id": "",
        "detail": "",
        "max_resumes": 9,
        "result": json.dumps(run.result),
        "error": run.error,
        "inputs": json.dumps(run.inputs),
        "seen_version": run.version,
        "change_reason": "try",
        "_save": "Save",
    }
    response = client.post(change_url(run), data, follow=True)
    assert "Not saved: only a worker" in response.content.decode()
    assert Run.objects.get(pk=run.pk).max_resumes == 5
    response = client.post(change_url(run), dict(data, status="failed"))
    assert response.status_code == 302
    assert Run.objects.get(pk=run.pk).max_resumes == 9
    assert list(AuditEvent.objects.values_list("action", "before", "after")) == [
        ("run_admin_edit", {"max_resumes": 5}, {"max_resumes": 9})
    ]


def test_deleting_and_adding_ledger_rows_is_not_offered(admin_client_for, stopped_refund):
    client = admin_client_for()
    run = stopped_refund
    step = step_of(run, "fetch_invoice")
    transitions.run_fork(
        run_id=run.run_id, step_id="decide", by="root", reason="for the audit row", confirm_resend=3
    )
    for model in ("run", "step", "settlement", "auditevent"):
        listing = client.get(reverse(f"admin:ledger_{model}_changelist")).content.decode()
        assert "delete_selected" not in listing, model
        assert client.get(reverse(f"admin:ledger_{model}_add")).status_code == 403
    event = AuditEvent.objects.first()
    assert event is not None
    for obj in (run, step, event):
        meta = obj._meta
        url = reverse(f"admin:{meta.app_label}_{meta.model_name}_delete", args=[obj.pk])
        assert client.get(url).status_code == 403
        assert client.post(url, {"post": "yes"}).status_code == 403
    response = client.post(
        reverse("admin:ledger_step_changelist"),
        {"action": "delete_selected", "_selected_action": [step.pk], "post": "yes"},
    )
    assert response.status_code in (200, 302)
    assert Step.objects.filter(pk=step.pk).exists()
    assert AuditEvent.objects.count() == 2


def test_settlements_and_audit_events_are_read_only_even_for_a_superuser(
    admin_client_for, blocked, people
) -> None:
    run = blocked("ops-blind", {"n": 5}, "charge.after_effect", "reconciliation")
    step = step_of(run, "charge")
    settlement = transitions.settlement_propose(
        step=step,
        outcome="happened",
        result={"charge_id": "ch_1"},
        reason="seen",
        by=people.alice,
        seen_version=step.version,
    )
    client = admin_client_for()
    event = AuditEvent.objects.get()
    for obj in (settlement, event):
        page = client.get(change_url(obj))
        assert page.status_code == 200
        assert 'name="_save"' not in page.content.decode()
        assert client.post(change_url(obj), {"reason": "changed"}).status_code == 403
    assert Settlement.objects.get().reason == "seen"
    assert (
        "&quot;charge_id&quot;: &quot;ch_1&quot;"
        in client.get(change_url(settlement)).content.decode()
    )


def test_staff_who_are_not_superusers_only_view(admin_client_for, stopped_refund) -> None:
    client = admin_client_for("viewer", superuser=False, perms=("view_step", "view_run"))
    step = step_of(stopped_refund, "fetch_invoice")
    page = client.get(change_url(step)).content.decode()
    assert "<pre" in page and "&quot;customer&quot;" in page  # the readable JSON block
    assert "change_reason" not in page and 'name="_save"' not in page
    response = client.post(change_url(step), step_form(step, attempt=5, change_reason="x"))
    assert response.status_code == 403
    assert step_of(stopped_refund, "fetch_invoice").attempt == 1
    assert client.get(change_url(stopped_refund)).status_code == 200
    assert not AuditEvent.objects.exists()


def test_a_run_id_that_looks_like_an_admin_escape_still_opens(admin_client_for) -> None:
    from ledger import transitions

    run = transitions.run_start(
        agent="refund", inputs={"invoice_id": "inv_1001"}, run_id="run_402b5F"
    )
    assert admin_client_for().get(change_url(run)).status_code == 200
