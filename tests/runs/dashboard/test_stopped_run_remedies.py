"""A way forward from every stop (issue 10): a clean run from a divergence, a resume that the
preview says would stop again is refused unless asked for anyway, the lookup-down refund's main
action is Resume, a step settled by the lookup says so, and a page with no steps says why."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from ledger.engine.live import SETTLED_BY_LOOKUP
from ledger.models import AuditEvent, Run, Step
from tests.support import plan_change
from tests.support.dashboard_runs import (
    budget_run,
    lookup_down_run,
    renewal_run,
    signed_in,
    start,
)

pytestmark = [pytest.mark.sqlite_ok, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _clean(dashboard_ready) -> Iterator[None]:

    plan_change.register()
    yield
    plan_change.unregister()


def operator() -> Client:
    return signed_in("operator", "olivia")


def diverged_run(execute: Any) -> Run:
    """Failed at step b under the old code; the deploy renamed b to c; a resume diverged."""
    run = start(plan_change.NAME, {"who": "ada"}, execute.clock)
    assert execute(run.run_id).status == "failed"
    plan_change.deploy()
    return run


def test_a_diverged_run_offers_a_clean_run_that_replaces_it(execute) -> None:
    client = operator()
    run = diverged_run(execute)
    page = client.post(
        f"/runs/{run.run_id}/resume/",
        {"reason": "try", "seen_version": Run.objects.get(pk=run.run_id).version, "anyway": "on"},
    )
    assert page.status_code == 302
    outcome = execute(run.run_id)
    assert (outcome.status, outcome.reason) == ("needs_attention", "divergence")
    html = client.get(f"/runs/{run.run_id}/").content.decode()
    assert f'href="/runs/{run.run_id}/clean/"' in html and "Start a clean run" in html
    form = client.get(f"/runs/{run.run_id}/clean/").content.decode()
    assert "empty ledger" in form and "This run is cancelled" in form
    stale_version = Run.objects.get(pk=run.run_id).version - 1
    refused = client.post(
        f"/runs/{run.run_id}/clean/", {"reason": "plan changed", "seen_version": stale_version}
    )
    assert refused.status_code == 409 and Run.objects.count() == 1
    done = client.post(
        f"/runs/{run.run_id}/clean/",
        {"reason": "plan changed", "seen_version": Run.objects.get(pk=run.run_id).version},
    )
    new = Run.objects.exclude(pk=run.run_id).get()
    assert done.status_code == 302 and done["Location"] == f"/runs/{new.run_id}/"
    old = Run.objects.get(pk=run.run_id)
    assert (new.status, new.parent_id, new.parent_kind) == ("queued", run.run_id, "clean")
    assert old.status == "cancelled"
    assert set(AuditEvent.objects.values_list("run_id", "action", "actor")) >= {
        (old.run_id, "run_clean", "olivia"),
        (new.run_id, "run_clean", "olivia"),
    }
    assert execute(new.run_id).status == "succeeded"


def test_a_resume_that_would_stop_again_is_refused_unless_asked_for_anyway(
    execute, crash_at
) -> None:
    client = operator()
    run = renewal_run(execute, crash_at)  # a charge with no read path: only a person can say
    form = client.get(f"/runs/{run.run_id}/resume/").content.decode()
    assert 'id="blocks-again"' in form and "has no read path: settle it first" in form
    assert 'name="anyway"' in form
    before = Run.objects.get(pk=run.run_id)
    refused = client.post(
        f"/runs/{run.run_id}/resume/", {"reason": "go", "seen_version": before.version}
    )
    after = Run.objects.get(pk=run.run_id)
    assert refused.status_code == 409 and "no resume spent" in refused.content.decode()
    assert (after.status, after.version, after.resume_count) == (
        "needs_attention",
        before.version,
        before.resume_count,
    )
    assert not AuditEvent.objects.filter(run_id=run.run_id, action="run_resume").exists()
    anyway = client.post(
        f"/runs/{run.run_id}/resume/",
        {"reason": "go", "seen_version": before.version, "anyway": "on"},
    )
    assert anyway.status_code == 302 and Run.objects.get(pk=run.run_id).status == "queued"


def test_the_lookup_down_refund_is_resumed_and_its_step_says_the_lookup_settled_it(
    execute, crash_at, monkeypatch
) -> None:
    client = operator()
    run = lookup_down_run(execute, crash_at, monkeypatch)
    html = client.get(f"/runs/{run.run_id}/").content.decode()
    primary = html.split('class="button primary"', 1)[1][:200]
    assert "Resume: ask the lookup again" in primary
    assert 'id="lookup-hint"' in html and "Settle by hand" in html
    monkeypatch.delenv("RUNLEDGER_PROVIDER_LOOKUP")  # the provider's lookup is back
    form = client.get(f"/runs/{run.run_id}/resume/").content.decode()
    assert 'id="blocks-again"' not in form  # a lookup that answers is no reason to refuse
    version = Run.objects.get(pk=run.run_id).version
    data = {"reason": "lookup is back", "seen_version": version}
    assert client.post(f"/runs/{run.run_id}/resume/", data).status_code == 302
    assert execute(run.run_id).status == "succeeded"
    step = Step.objects.get(run_id=run.run_id, step_id="refund")
    assert (step.status, step.settled_by) == ("succeeded", SETTLED_BY_LOOKUP)
    html = client.get(f"/runs/{run.run_id}/").content.decode()
    assert f"settled by {SETTLED_BY_LOOKUP}".replace("'", "&#x27;") in html


def test_a_run_with_no_steps_says_how_many_executions_recorded_none(execute, crash_at) -> None:
    run = budget_run(execute, crash_at)  # killed inside its first read, then out of budget
    html = operator().get(f"/runs/{run.run_id}/").content.decode()
    assert 'id="no-steps"' in html and "No step was recorded in 2 executions" in html
