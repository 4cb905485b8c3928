"""A fork or a clean run that would send effects again lists them and needs a typed
confirmation; a resume the dry replay says would stop again is refused by the transition, on
the run's page and in bulk, with the reason and nothing spent (issue 23, item 3)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from ledger.models import AuditEvent, Run, Step
from tests.support.dashboard_runs import (
    renewal_run,
    signed_in,
    succeeded_run,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> None:
    """The dashboard's clean slate (``dashboard_ready``, conftest)."""


def operator() -> Client:
    return signed_in("operator", "olivia")


def test_the_fork_form_lists_the_effects_it_sends_again_and_needs_the_phrase(execute) -> None:
    client = operator()
    run = succeeded_run(execute)
    keys = dict(Step.objects.filter(run=run).values_list("step_id", "effect_key"))
    form = client.get(f"/runs/{run.run_id}/fork/?step=decide").content.decode()
    listed = form[form.index('id="sent-again"') :]
    assert "3 effects will be sent again" in listed
    for step_id in ("refund", "email_customer", "notify"):
        assert f'<td class="mono">{step_id}</td>' in listed and keys[step_id] in listed
    assert 'name="resend_count" value="3"' in form and "send 3 again" in form

    post = {"step_id": "decide", "reason": "redo", "resend_count": "3"}
    for typed in ("", "yes", "send 2 again"):
        refused = client.post(f"/runs/{run.run_id}/fork/", post | {"confirm": typed})
        assert refused.status_code == 400
        assert "Type &quot;send 3 again&quot; to confirm" in refused.content.decode()
    # A hand-made request that claims nothing is sent again is refused by the transition.
    sneaky = client.post(f"/runs/{run.run_id}/fork/", {"step_id": "decide", "reason": "redo"})
    assert sneaky.status_code == 409
    assert "This fork would send 3 effects again under new keys" in sneaky.content.decode()
    assert Run.objects.count() == 1 and not AuditEvent.objects.exists()

    done = client.post(f"/runs/{run.run_id}/fork/", post | {"confirm": " Send 3  again "})
    fork = Run.objects.get(parent=run)
    assert done.status_code == 302 and done["Location"] == f"/runs/{fork.run_id}/"
    audit = AuditEvent.objects.get(run_id=fork.run_id, action="run_fork")
    assert [(e["step_id"], e["old_key"]) for e in audit.after["sent_again"]] == [
        ("refund", keys["refund"]),
        ("email_customer", keys["email_customer"]),
        ("notify", keys["notify"]),
    ]


def test_a_fork_after_the_last_effect_says_nothing_is_sent_again(execute) -> None:
    client = operator()
    run = succeeded_run(execute)
    form = client.get(f"/runs/{run.run_id}/fork/?step=notify").content.decode()
    assert 'id="sent-again"' not in form and "No effect is sent again" in form
    done = client.post(
        f"/runs/{run.run_id}/fork/", {"step_id": "notify", "reason": "redo", "resend_count": "0"}
    )
    assert done.status_code == 302 and Run.objects.filter(parent=run).count() == 1


def test_the_clean_run_form_lists_the_effects_and_needs_the_phrase(execute) -> None:
    client = operator()
    run = succeeded_run(execute)
    form = client.get(f"/runs/{run.run_id}/clean/").content.decode()
    assert "3 effects will be sent again" in form and 'name="resend_count" value="3"' in form
    post = {"reason": "again", "seen_version": run.version, "resend_count": "3"}
    refused = client.post(f"/runs/{run.run_id}/clean/", post)
    assert refused.status_code == 400 and Run.objects.count() == 1
    done = client.post(f"/runs/{run.run_id}/clean/", post | {"confirm": "send 3 again"})
    new = Run.objects.get(parent=run)
    assert done.status_code == 302
    audit = AuditEvent.objects.get(run_id=new.run_id, action="run_clean")
    assert len(audit.after["sent_again"]) == 3


def test_resume_and_bulk_resume_of_a_run_that_would_stop_again_spend_nothing(
    execute, crash_at
) -> None:
    client = operator()
    run = renewal_run(execute, crash_at)
    before = Run.objects.get(pk=run.run_id)
    refused = client.post(
        f"/runs/{run.run_id}/resume/", {"reason": "go", "seen_version": before.version}
    )
    page = refused.content.decode()
    assert refused.status_code == 409 and "no resume spent" in page
    assert "charge has no read path" in page and "resume anyway" in page

    preview = client.get(f"/bulk/?action=resume&scope=selection&run={run.run_id}")
    text = preview.content.decode()
    assert "would stop again at once, no resume spent" in text
    assert "charge has no read path" in text
    assert re.findall(r'name="target" value="([^"]+)"', text) == []
    # Confirmed anyway, from a page that listed it before it blocked: refused per run.
    applied = client.post(
        "/bulk/apply/",
        {"action": "resume", "target": [f"{run.run_id}:{before.version}"], "reason": "sweep"},
    )
    text = applied.content.decode()
    assert applied.status_code == 200 and '<b id="refused-count">1</b> refused' in text
    assert "charge has no read path" in text
    after = Run.objects.get(pk=run.run_id)
    assert (after.status, after.version, after.resume_count) == (
        "needs_attention",
        before.version,
        before.resume_count,
    )
    assert not AuditEvent.objects.filter(run_id=run.run_id).exists()
