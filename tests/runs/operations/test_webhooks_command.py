"""`manage.py webhooks add|list|remove` (issue 20, item 5): the secret printed once, never
listed; refusals print one line, exit 1 and write nothing; changes audited as ``cli:<login>``."""

from __future__ import annotations

import getpass
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.models import AuditEvent, WebhookSubscription
from tests.support import event_agents

pytestmark = pytest.mark.django_db

AGENT = event_agents.events_echo.name
URL = "https://app.example.com/hooks/runledger"


def run_cmd(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("webhooks", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"CommandError: {exc}"
    return 0, out.getvalue()


def test_add_prints_the_secret_once_and_list_never_shows_it() -> None:
    code, out = run_cmd("add", URL, "--agent", AGENT, "--events", "run.succeeded,run.failed")
    subscription = WebhookSubscription.objects.get()
    assert code == 0
    assert f"subscription {subscription.pk}: agent {AGENT} → {URL}" in out
    assert f"signing secret (shown once, keep it): {subscription.secret}" in out
    assert subscription.events == ["run.succeeded", "run.failed"]
    code, listed = run_cmd("list")
    assert code == 0 and subscription.secret not in listed
    assert listed.splitlines() == [
        f"{subscription.pk}  agent {AGENT} → {URL} (run.succeeded, run.failed)",
        "1 subscription(s)",
    ]
    code, as_json = run_cmd("list", "--json")
    assert json.loads(as_json)["url"] == URL and "secret" not in json.loads(as_json)
    event = AuditEvent.objects.get()
    assert (event.action, event.actor) == ("webhook_subscribe", f"cli:{getpass.getuser()}")


def test_remove_stops_a_subscription_and_list_all_still_shows_it() -> None:
    run_cmd("add", URL, "--agent", AGENT)
    pk = WebhookSubscription.objects.get().pk
    assert run_cmd("remove", str(pk))[0] == 0
    assert run_cmd("list")[1].strip() == "0 subscription(s)"
    assert "(removed " in run_cmd("list", "--all")[1]
    code, out = run_cmd("remove", str(pk))
    assert code == 1 and "already removed" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "ftp://example.com/x", "--agent", AGENT], "is not an http(s) URL"),
        (["add", URL, "--agent", "nobody"], "no agent named 'nobody'"),
        (["add", URL, "--run", "run_missing"], "there is no run 'run_missing'"),
        (["add", URL, "--agent", AGENT, "--events", "run.done"], "unknown event(s): run.done"),
        (["remove", "999"], "no webhook subscription 999"),
    ],
)
def test_a_refused_command_says_why_exits_1_and_writes_nothing(
    args: list[str], message: str
) -> None:
    code, out = run_cmd(*args)
    assert code == 1 and message in out and "Traceback" not in out
    assert not WebhookSubscription.objects.exists() and not AuditEvent.objects.exists()
