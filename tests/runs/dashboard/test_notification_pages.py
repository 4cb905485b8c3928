"""The Notifications page and a run page's "Who was told" (issue 10)."""

from __future__ import annotations

import pytest
from django.test import Client

from ledger.models import Run
from ledger.processes import delivery
from tests.support.dashboard_runs import restore_roles, start, user_in
from tests.support.receivers import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def blocked_renewal(execute, crash_at, clock) -> Run:
    run = start("renewal", {"customer": "cus_hopper"}, clock)
    crash_at("gateway.after_effect")
    execute(run.run_id, crash_expected=True)
    assert execute(run.run_id).status == "needs_attention"
    return Run.objects.get(pk=run.run_id)


def test_the_notifications_page_and_the_run_page_say_who_was_told(
    execute, crash_at, settings, clock
) -> None:
    restore_roles()
    settings.RUNLEDGER_NOTIFY_WEBHOOK_URL = f"http://127.0.0.1:{free_port()}/hook"  # down
    run = blocked_renewal(execute, crash_at, clock)
    delivery.deliver_due(clock=clock)
    client = Client()
    client.force_login(user_in("viewer"))
    page = client.get("/notifications/").content.decode()
    assert "Renew the subscription of cus_hopper" in page and "unreachable" in page
    assert 'class="badge delivery-pending"' in page
    assert client.get("/notifications/?status=sent").content.decode().count("delivery-pending") == 0
    assert client.get("/notifications/?status=bogus&before=x").status_code == 200
    run_page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert 'id="run-told"' in run_page and "1 attempt so far" in run_page


def test_completion_events_are_listed_with_their_subscription(execute, clock) -> None:
    from ledger import events
    from tests.support import event_agents

    restore_roles()
    url = f"http://127.0.0.1:{free_port()}/hooks/app"  # down
    subscription, _ = events.subscribe(url, agent=event_agents.events_echo.name)
    run = start(event_agents.events_echo.name, {"n": 7}, clock)
    assert execute(run.run_id).status == "succeeded"
    delivery.deliver_due(clock=clock)
    client = Client()
    client.force_login(user_in("viewer"))
    page = client.get("/notifications/").content.decode()
    assert "event: run succeeded" in page and "Echo 7" in page
    assert f"subscription {subscription.pk}" in page and url in page and "unreachable" in page
    assert "msg_" in page
    run_page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert f"event: run succeeded</b> by subscription {subscription.pk}" in run_page
