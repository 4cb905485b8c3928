"""The effect audit (`manage.py audit_effects` and its page) on seeded data: each kind of
difference between the ledger and the simulated downstream systems is reported, nothing else;
a pass is bounded, resumable, rate-limited and writes nothing to the ledger."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from ledger import transitions
from ledger.examples.models import OutboxMessage, ProviderCharge
from ledger.models import EffectAudit, Run, Step
from ledger.processes.effect_audit import audit_effects
from tests.support.dashboard_runs import restore_roles, user_in

pytestmark = pytest.mark.django_db(transaction=True)


def refund_run(execute: Any, invoice: str) -> str:
    run_id = transitions.run_start(agent="refund", inputs={"invoice_id": invoice}).run_id
    assert execute(run_id).status == "succeeded"
    return run_id


@pytest.fixture
def seeded(execute: Any) -> dict[str, str]:
    """Three refunds; then the downstream systems and the ledger are made to disagree."""
    done_gone = refund_run(execute, "inv_1001")  # the provider lost its charge; email altered
    abandoned = refund_run(execute, "inv_1003")  # ledger: abandoned; the provider has it
    clean = refund_run(execute, "inv_1005")  # agrees everywhere
    ProviderCharge.objects.filter(idempotency_key=f"{done_gone}:refund").delete()
    OutboxMessage.objects.filter(message_id=f"{done_gone}:email_customer").update(
        to="someone-else@example.com"
    )
    Step.objects.filter(run_id=abandoned, step_id="refund").update(status="abandoned")
    ProviderCharge.objects.create(
        idempotency_key="run_ghost:refund", charge_id="ch_ghost", customer="cus_x", amount_cents=-1
    )
    return {"done_gone": done_gone, "abandoned": abandoned, "clean": clean}


def found(audit: EffectAudit) -> set[tuple[str, str, str]]:
    return {(f.difference, f.run_id, f.step_id) for f in audit.findings.all()}


def expected(seeded: dict[str, str]) -> set[tuple[str, str, str]]:
    return {
        ("missing_downstream", seeded["done_gone"], "refund"),
        ("result_differs", seeded["done_gone"], "email_customer"),
        ("unexpected_downstream", seeded["abandoned"], "refund"),
        ("unknown_to_ledger", "run_ghost", ""),
    }


def test_each_kind_of_difference_is_reported_and_nothing_else(seeded: dict[str, str]) -> None:
    audit = audit_effects(rate=0)
    assert audit.finished
    assert found(audit) == expected(seeded)
    assert audit.checked == 6  # each run's refund and email
    assert audit.skipped == 3  # each run's notify: notify_team has no read path
    differs = audit.findings.get(difference="result_differs")
    assert differs.ledger_result["to"] == "cus_ada@example.com"
    assert differs.downstream["to"] == "someone-else@example.com"


def test_a_pass_is_bounded_and_resumes_where_it_stopped(seeded: dict[str, str]) -> None:
    first = audit_effects(rate=0, limit=4)
    assert not first.finished and first.cursor > 0
    passes = 1
    again = first
    while not again.finished and passes < 10:
        again = audit_effects(rate=0, limit=4, resume=first.pk)
        passes += 1
    assert again.finished and again.pk == first.pk and passes == 3  # 9 rows, 4 a pass
    assert found(again) == expected(seeded)
    assert again.checked + again.skipped == 9


def test_a_pass_is_rate_limited(seeded: dict[str, str]) -> None:
    now = [100.0]  # a fake monotonic clock that only sleeping advances
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    audit_effects(rate=0.5, sleep=sleep, monotonic=lambda: now[0])  # one question per 2 s
    # 6 reconciles and 2 list hooks: every question after the first waits its 2 s.
    assert slept == pytest.approx([2.0] * 7)


def test_the_audit_writes_nothing_to_the_ledger(seeded: dict[str, str]) -> None:
    steps = list(Step.objects.order_by("pk").values())
    runs = list(Run.objects.order_by("pk").values())
    audit_effects(rate=0)
    assert list(Step.objects.order_by("pk").values()) == steps
    assert list(Run.objects.order_by("pk").values()) == runs


def test_the_command_lists_the_differences(seeded: dict[str, str]) -> None:
    out = StringIO()
    call_command("audit_effects", "--rate", "0", "--since", "7d", stdout=out)
    text = out.getvalue()
    assert f"missing_downstream     {seeded['done_gone']}:refund" in text
    assert "unknown_to_ledger      run_ghost:refund" in text
    assert "4 difference(s)" in text and "finished" in text
    with pytest.raises(CommandError, match="7d"):
        call_command("audit_effects", "--since", "a week")
    with pytest.raises(CommandError, match="no effect audit"):
        call_command("audit_effects", "--resume", "999999")


def test_the_page_shows_the_report_and_each_run_links_to_it(seeded: dict[str, str]) -> None:
    restore_roles()
    audit = audit_effects(rate=0)
    viewer = Client()
    viewer.force_login(user_in("viewer"))
    page = viewer.get(reverse("runs:effect_audits")).content.decode()
    assert seeded["abandoned"] in page and "run_ghost:refund" in page
    assert "the ledger says done; the downstream system has nothing" in page
    run_page = viewer.get(reverse("runs:detail", args=[seeded["done_gone"]])).content.decode()
    assert reverse("runs:effect_audit", args=[audit.pk]) in run_page
    clean_page = viewer.get(reverse("runs:detail", args=[seeded["clean"]])).content.decode()
    assert 'id="effect-findings"' not in clean_page
    assert viewer.post(reverse("runs:effect_audit_run")).status_code == 403


def test_an_operator_runs_a_pass_from_the_page(seeded: dict[str, str]) -> None:
    restore_roles()
    operator = Client()
    operator.force_login(user_in("operator"))
    answer = operator.post(reverse("runs:effect_audit_run"), {"agent": "refund"})
    audit = EffectAudit.objects.get()
    assert answer.status_code == 302 and answer["Location"].endswith(f"/effects/{audit.pk}/")
    assert audit.by == "operator-user" and audit.agent == "refund" and audit.finished
    assert found(audit) == expected(seeded)
