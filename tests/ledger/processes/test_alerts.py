"""Alert rules and paging (issue 35, item 3): rules over the runs' states evaluated against the
ledger, routed to loopback receivers speaking PagerDuty's Events API v2, Opsgenie's Alert API,
a Slack incoming webhook and a signed Standard Webhook — one incident per rule and scope, paged
once however often it is evaluated, acknowledged (the acknowledging person is then on its runs),
resolved when the condition clears; a page that fails is retried in order; an evaluator process
SIGKILLed after a rule's commit, and a deliverer SIGKILLed after a send, lose no page and open
no second incident."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from ledger import transitions
from ledger.alert_rules import parse_receivers, parse_rules
from ledger.models import Alert, AuditAction, AuditEvent, DeliveryStatus, Handover, Notification
from ledger.processes import alerting, delivery
from ledger.signatures import signature_of
from ledger.webhooks import new_secret
from tests.support.receivers import PagingReceivers

pytestmark = pytest.mark.django_db(transaction=True)

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"
BLOCKED_15 = {"name": "blocked-15m", "kind": "blocked_longer", "minutes": 15, "per": "agent",
              "severity": "critical"}  # fmt: skip


@pytest.fixture
def pagers(settings: Any) -> Iterator[PagingReceivers]:
    receivers = PagingReceivers(routing_key="R0UTING", genie_key="g3nie", secret=new_secret())
    settings.RUNLEDGER_ALERT_RECEIVERS = receivers.receivers_setting()
    settings.RUNLEDGER_ALERT_RULES = json.dumps([BLOCKED_15])
    settings.RUNLEDGER_NOTIFY_BACKOFF_SECONDS = 10.0
    yield receivers
    receivers.stop()


CUSTOMERS = ("cus_hopper", "cus_knuth", "cus_lovelace")


def _renewal(blocked: Any, n: int) -> Any:
    customer = CUSTOMERS[n]
    return blocked("renewal", {"customer": customer}, "gateway.after_effect", "reconciliation")


def _deliver(at: Any) -> list[bool]:
    return [d.ok for d in delivery.deliver_due(clock=lambda: at)]


def test_bad_rules_and_receivers_are_refused_saying_which() -> None:
    receivers = parse_receivers(
        '{"pd": {"type": "pagerduty", "routing_key": "k"}, "s": {"type": "slack", "url": "https://h"}}'
    )
    assert receivers["pd"].url == "https://events.pagerduty.com/v2/enqueue"
    bad = {
        '[{"name": "x", "kind": "blocked_longer"}]': "'minutes' must be a positive number",
        '[{"name": "x", "kind": "nope", "minutes": 1}]': "'kind' must be one of",
        '[{"name": "X Y", "kind": "blocked_longer", "minutes": 1}]': "'name' is 1-40",
        '[{"name": "x", "kind": "blocked_rate", "minutes": 5, "percent": 500}]': "at most 100",
        '[{"name": "x", "kind": "blocked_longer", "minutes": 1, "to": ["pagerdooty"]}]': "'to'",
        '[{"name": "x", "kind": "recovery_lagging", "seconds": 1, "per": "agent"}]': "'per'",
        '[{"name": "x", "kind": "gate_waiting", "minutes": 1, "minuets": 2}]': "unknown field",
        '{"name": "x"}': "must be a JSON list",
        "[{": "is not JSON",
    }
    for text, words in bad.items():
        with pytest.raises(ValueError, match=words):
            parse_rules(text, receivers)
    with pytest.raises(ValueError, match="needs 'routing_key'"):
        parse_receivers('{"pd": {"type": "pagerduty"}}')
    with pytest.raises(ValueError, match="whsec_"):
        parse_receivers('{"h": {"type": "webhook", "url": "https://h", "secret": "plain"}}')


def test_an_error_signature_drops_numbers_ids_and_hashes() -> None:
    same = {
        signature_of("timeout after 30.2s for cus_123"),
        signature_of("timeout after 29.8s for cus_456abc\nTraceback (most recent call last): …"),
        signature_of("  timeout after 31s   for cus_9  "),
    }
    assert same == {"timeout after <n>s for cus_<id>"}
    assert signature_of("charge ch_3Nk9xY failed at 0x7f3a2b1c, request 550e8400-e29b-41d4-a716-"
                        "446655440000, digest deadbeefcafe1234") == (
        "charge ch_<id> failed at <hex>, request <hex>, digest <hex>"
    )  # fmt: skip
    assert signature_of("card_declined: insufficient funds") == "card_declined: insufficient funds"
    assert signature_of("") == ""


def test_one_incident_per_agent_paged_once_acknowledged_and_resolved(
    pagers: PagingReceivers, blocked: Any, clock: Any
) -> None:
    runs = [_renewal(blocked, n) for n in range(2)]
    at = clock()
    assert alerting.alerts_evaluate(clock=lambda: at + timedelta(minutes=10)).opened == []
    later = at + timedelta(minutes=16)
    done = alerting.alerts_evaluate(clock=lambda: later)
    assert done.opened == ["runledger/blocked-15m/renewal"]
    for _ in range(3):  # evaluated again and again: the same incident, no new page
        assert alerting.alerts_evaluate(clock=lambda: later).opened == []
    runs.append(_renewal(blocked, 2))  # a third run joins the open incident: no new page either
    assert alerting.alerts_evaluate(clock=lambda: at + timedelta(minutes=40)).kept == 1
    alert = Alert.objects.get()
    assert (alert.rule, alert.scope, alert.status, alert.detail["count"]) == (
        "blocked-15m", "renewal", "triggered", 3)  # fmt: skip
    assert sorted(alert.run_ids) == sorted(r.run_id for r in runs)
    assert Notification.objects.filter(alert=alert).count() == 4  # one trigger per receiver
    assert _deliver(at + timedelta(minutes=40)) == [True] * 4

    acked = alerting.alert_acknowledge(
        alert_id=alert.pk, by="olivia", clock=lambda: at + timedelta(minutes=41)
    )
    assert (acked.changed, sorted(acked.taken)) == (True, sorted(r.run_id for r in runs))
    assert set(Handover.objects.values_list("taken_by", flat=True)) == {"olivia"}
    assert AuditEvent.objects.filter(action=AuditAction.ALERT_ACK, actor="olivia").count() == 1
    again = alerting.alert_acknowledge(alert_id=alert.pk, by="peter")
    assert (again.changed, again.alert.acked_by) == (False, "olivia")
    assert _deliver(at + timedelta(minutes=41)) == [True] * 4  # one acknowledge per receiver

    for run in runs:  # the condition clears: the incident resolves, once
        transitions.run_cancel(run_id=run.run_id, by="olivia", reason="refunded by hand",
                               seen_version=None)  # fmt: skip
    assert alerting.alerts_evaluate(clock=lambda: at + timedelta(minutes=50)).resolved == [
        alert.dedup_key
    ]
    assert alerting.alerts_evaluate(clock=lambda: at + timedelta(minutes=51)).resolved == []
    assert _deliver(at + timedelta(minutes=51)) == [True] * 4
    with pytest.raises(transitions.NotAllowed):
        alerting.alert_acknowledge(alert_id=alert.pk, by="olivia")

    key = "runledger/blocked-15m/renewal"
    assert [(e["event_action"], e["dedup_key"]) for e in pagers.pagerduty] == [
        ("trigger", key), ("acknowledge", key), ("resolve", key)]  # fmt: skip
    trigger = pagers.pagerduty[0]["payload"]
    assert (trigger["severity"], trigger["component"], trigger["source"]) == (
        "critical", "renewal", "runledger")  # fmt: skip
    assert pagers.pd_incidents == [{"dedup_key": key, "status": "resolved", "triggers": 1}]
    assert [verb for verb, _ in pagers.opsgenie] == ["create", "acknowledge", "close"]
    assert pagers.og_alerts == [
        {"alias": key, "status": "closed", "count": 1, "acked_by": "olivia"}
    ]
    assert len(pagers.slack) == 3
    assert pagers.slack[1].startswith(":eyes: Acknowledged by olivia: 3 runs of agent renewal")
    assert [e["type"] for _, e in pagers.hook] == ["alert.trigger", "alert.acknowledge",
                                                  "alert.resolve"]  # fmt: skip
    assert len({msg_id for msg_id, _ in pagers.hook}) == 3
    assert pagers.refused == []


def test_a_page_that_failed_is_retried_before_the_resolve_behind_it(
    pagers: PagingReceivers, blocked: Any, clock: Any, settings: Any
) -> None:
    settings.RUNLEDGER_ALERT_RULES = json.dumps([{**BLOCKED_15, "to": ["pd"]}])
    run = _renewal(blocked, 0)
    at = clock() + timedelta(minutes=20)
    alerting.alerts_evaluate(clock=lambda: at)
    pagers.down()
    assert _deliver(at) == [False]  # PagerDuty answered 503: back-off
    transitions.run_cancel(run_id=run.run_id, by="olivia", reason="done", seen_version=None)
    alerting.alerts_evaluate(clock=lambda: at + timedelta(seconds=1))  # resolved: a page queued
    pagers.up()
    # The resolve is due now, the trigger only after its back-off: the resolve waits for it.
    assert _deliver(at + timedelta(seconds=2)) == []
    assert _deliver(at + timedelta(seconds=11)) == [True, True]
    assert [e["event_action"] for e in pagers.pagerduty] == ["trigger", "resolve"]
    assert pagers.pd_incidents[0]["status"] == "resolved"


def _database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s.get("PASSWORD") else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="a second process needs a server")
def test_an_evaluator_killed_mid_pass_and_mid_delivery_loses_no_page_and_pages_once(
    pagers: PagingReceivers, blocked: Any, settings: Any
) -> None:
    rules = [
        {**BLOCKED_15, "per": "", "to": ["pd", "og"]},
        {"name": "blocked-rate", "kind": "blocked_rate", "percent": 50, "minutes": 100000,
         "min_runs": 1, "to": ["pd", "og"]},
    ]  # fmt: skip
    settings.RUNLEDGER_ALERT_RULES = json.dumps(rules)
    _renewal(blocked, 0)
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "RUNLEDGER_ALERT_RULES": settings.RUNLEDGER_ALERT_RULES,
        "RUNLEDGER_ALERT_RECEIVERS": settings.RUNLEDGER_ALERT_RECEIVERS,
        "RUNLEDGER_HARNESS": "1",  # the fault registry kills the process at the named point
    }

    def evaluator(point: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(MANAGE), "evaluate_alerts"],
            env={**env, "RUNLEDGER_KILL_AT": point}, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip

    # Killed after the first rule's commit: its incident and pages are there, nothing sent.
    first = evaluator("alerts.after_rule")
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert list(Alert.objects.values_list("rule", flat=True)) == ["blocked-15m"]
    assert Notification.objects.filter(status=DeliveryStatus.PENDING).count() == 2
    assert pagers.pagerduty == [] and pagers.opsgenie == []
    # Again, killed after the receiver took the first page and before it was recorded.
    second = evaluator("notify.after_send")
    assert second.returncode == -signal.SIGKILL, second.stderr[-2000:]
    assert sorted(Alert.objects.values_list("rule", flat=True)) == ["blocked-15m", "blocked-rate"]
    assert len(pagers.pagerduty) == 1
    # The next pass (the claim of the dead deliverer lapsed): every page, the first one again.
    later = timezone.now() + timedelta(minutes=2)
    assert alerting.alerts_evaluate(clock=lambda: later).opened == []
    assert _deliver(later) == [True] * 4
    assert Alert.objects.count() == 2
    assert set(Notification.objects.values_list("status", flat=True)) == {DeliveryStatus.SENT}
    keys = ["runledger/blocked-15m/all", "runledger/blocked-rate/all"]
    assert sorted((i["dedup_key"], i["status"]) for i in pagers.pd_incidents) == [
        (k, "triggered") for k in keys]  # fmt: skip
    sent = sorted(e["dedup_key"] for e in pagers.pagerduty)
    assert sent == [keys[0], keys[0], keys[1]]  # the first sent twice, folded by its dedup key
    assert sorted(a["alias"] for a in pagers.og_alerts) == keys
    assert [a["count"] for a in pagers.og_alerts] == [1, 1]
    assert pagers.refused == []


def test_an_incident_of_a_rule_taken_out_of_the_settings_is_resolved_and_paged(
    pagers: PagingReceivers, blocked: Any, clock: Any, settings: Any
) -> None:
    settings.RUNLEDGER_ALERT_RULES = json.dumps([{**BLOCKED_15, "to": ["pd"]}])
    _renewal(blocked, 0)
    at = clock() + timedelta(minutes=20)
    assert len(alerting.alerts_evaluate(clock=lambda: at).opened) == 1
    settings.RUNLEDGER_ALERT_RULES = ""
    assert alerting.alerts_evaluate(clock=lambda: at).resolved == ["runledger/blocked-15m/renewal"]
    assert alerting.alerts_evaluate(clock=lambda: at).resolved == []
    assert _deliver(at) == [True] * 5  # the trigger, then the resolve to every receiver
    assert [e["event_action"] for e in pagers.pagerduty] == ["trigger", "resolve"]
    assert Alert.objects.get().status == "resolved"


def test_a_rule_per_team_and_a_teams_own_rule_page_for_their_teams_runs_only(
    pagers: PagingReceivers, blocked: Any, clock: Any, settings: Any
) -> None:
    from ledger.models import Run

    runs = [_renewal(blocked, n) for n in range(3)]
    Run.objects.filter(pk=runs[0].run_id).update(team="payments")
    Run.objects.filter(pk__in=[r.run_id for r in runs[1:]]).update(team="search")
    settings.RUNLEDGER_ALERT_RULES = json.dumps([
        {"name": "per-team", "kind": "blocked_longer", "minutes": 15, "per": "team", "to": ["pd"]},
        {"name": "payments-own", "kind": "blocked_longer", "minutes": 15, "teams": ["payments"],
         "to": ["slack"]},
    ])  # fmt: skip
    done = alerting.alerts_evaluate(clock=lambda: clock() + timedelta(minutes=16))
    assert sorted(done.opened) == [
        "runledger/payments-own/all",
        "runledger/per-team/payments",
        "runledger/per-team/search",
    ]
    by_key = {a.dedup_key: a for a in Alert.objects.all()}
    assert by_key["runledger/per-team/search"].detail["count"] == 2
    assert by_key["runledger/payments-own/all"].run_ids == [runs[0].run_id]
    rules = {r.name: r for r in alerting.configured().rules}
    assert rules["per-team"].teams_of("search") == ("search",)
    assert rules["payments-own"].teams_of("") == ("payments",)
    with pytest.raises(ValueError, match="'teams'"):
        parse_rules('[{"name": "x", "kind": "blocked_longer", "minutes": 1, "teams": ["A B"]}]', {})
    with pytest.raises(ValueError, match="fleet"):
        parse_rules('[{"name": "x", "kind": "recovery_lagging", "seconds": 1, "teams": ["a"]}]', {})
