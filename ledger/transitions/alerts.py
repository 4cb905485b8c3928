"""Alert incidents: opened when a rule's condition holds, kept while it holds, resolved when it
clears, acknowledged by a person — each change one transaction that writes the incident's row
and its pages (one ``Notification`` per receiver, ``channel`` ``alert:<receiver>``), so an
evaluator that dies before its commit wrote nothing (the next tick finds the condition again)
and one that dies after it left pages that the deliverers send (``ledger.processes.delivery``).

One incident per (rule, scope): a partial unique constraint admits one open incident, and each
change is a compare-and-set on its ``version``, so two evaluators at once open it once and
resolve it once. A page's ``event_key`` is ``alert:<id>:<action>``: each incident is triggered,
acknowledged and resolved at most once per receiver, however often it is evaluated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from ledger import signals
from ledger.alert_rules import Finding, Receiver, Rule
from ledger.conf import conf
from ledger.errors import Conflict, InvalidInput, NotAllowed, OperationError
from ledger.models import Alert, AlertStatus, AuditAction, Notification, NotificationKind
from ledger.transitions._common import Actor, actor_name, record
from ledger.transitions.handover import run_take
from ledger.transitions.notify import idempotency_key

Clock = Callable[[], datetime]

ACTIONS = {
    "trigger": NotificationKind.ALERT_TRIGGER,
    "acknowledge": NotificationKind.ALERT_ACK,
    "resolve": NotificationKind.ALERT_RESOLVE,
}


@dataclass(frozen=True)
class Applied:
    opened: list[Alert]
    resolved: list[Alert]
    kept: int


def dedup_key(rule: str, scope: str) -> str:
    """The receivers' grouping key of (rule, scope): stable across evaluations and restarts."""
    return f"runledger/{rule}/{scope or 'all'}"[:300]


def alerts_apply(
    *,
    rule: Rule,
    found: Mapping[str, Finding],
    receivers: Mapping[str, Receiver],
    clock: Clock = timezone.now,
) -> Applied:
    """Bring the rule's incidents in line with what its condition found now (scope → finding):
    open an incident (and page) for each new scope, refresh the ones still found (no page),
    resolve (and page) the open ones no longer found."""
    now = clock()
    opened: list[Alert] = []
    resolved: list[Alert] = []
    kept = 0
    open_now = {a.scope: a for a in Alert.objects.filter(rule=rule.name).exclude(status="resolved")}
    for scope, finding in found.items():
        current = open_now.get(scope)
        if current is not None:
            kept += _refresh(current, finding, now)
            continue
        alert = _open(rule, scope, finding, receivers, now)
        if alert is not None:
            opened.append(alert)
    for scope, alert in open_now.items():
        if scope not in found and _resolve(alert, rule, receivers, now):
            resolved.append(alert)
    if opened or resolved:
        signals.send_notifications_queued_on_commit()
    return Applied(opened=opened, resolved=resolved, kept=kept)


def _open(
    rule: Rule, scope: str, finding: Finding, receivers: Mapping[str, Receiver], now: datetime
) -> Alert | None:
    try:
        with transaction.atomic():
            alert = Alert(
                rule=rule.name,
                scope=scope[:200],
                dedup_key=dedup_key(rule.name, scope),
                summary=finding.summary[:300],
                detail=finding.detail,
                opened_at=now,
                seen_at=now,
            )
            alert.save(force_insert=True)
            _page(alert, rule, "trigger", receivers, now)
    except IntegrityError:
        return None  # another evaluator opened it a moment ago: one incident
    return alert


def _refresh(alert: Alert, finding: Finding, now: datetime) -> int:
    return Alert.objects.filter(pk=alert.pk, version=alert.version).update(
        summary=finding.summary[:300], detail=finding.detail, seen_at=now, version=F("version") + 1
    )


def _resolve(
    alert: Alert, rule: Rule | None, receivers: Mapping[str, Receiver], now: datetime
) -> bool:
    with transaction.atomic():
        done = (
            Alert.objects.filter(pk=alert.pk, version=alert.version)
            .exclude(status=AlertStatus.RESOLVED)
            .update(status=AlertStatus.RESOLVED, resolved_at=now, version=F("version") + 1)
        )
        if done != 1:
            return False  # changed since it was read (an ack, another evaluator): next tick
        alert.refresh_from_db()
        _page(alert, rule, "resolve", receivers, now)
    return True


def alerts_resolve_orphans(
    *, rules: Iterable[str], receivers: Mapping[str, Receiver], clock: Clock = timezone.now
) -> list[Alert]:
    """Resolve the open incidents of rules no longer declared, paging the resolve to every
    receiver configured (the removed rule's own list is gone); the incidents resolved."""
    now = clock()
    orphans = Alert.objects.exclude(status=AlertStatus.RESOLVED).exclude(rule__in=list(rules))
    done = [alert for alert in orphans if _resolve(alert, None, receivers, now)]
    if done:
        signals.send_notifications_queued_on_commit()
    return done


def _page(
    alert: Alert, rule: Rule | None, action: str, receivers: Mapping[str, Receiver], now: datetime
) -> int:
    """One page per receiver of the rule (call inside the change's transaction)."""
    names = list(rule.to) if rule is not None else list(receivers)
    rows = []
    event_key = f"alert:{alert.pk}:{action}"
    base = conf.RUNLEDGER_PUBLIC_URL.rstrip("/")
    payload = {
        "action": action,
        "alert_id": alert.pk,
        "rule": alert.rule,
        "scope": alert.scope,
        "dedup_key": alert.dedup_key,
        "summary": alert.summary,
        "severity": rule.severity if rule is not None else "error",
        "condition": rule.describe() if rule is not None else "",
        "status": alert.status,
        "acked_by": alert.acked_by,
        "opened_at": alert.opened_at.isoformat(),
        "at": now.isoformat(),
        "count": int((alert.detail or {}).get("count", 0)),
        "run_ids": alert.run_ids[:20],
        "url": f"{base}/alerts/#alert-{alert.pk}",
    }
    for name in names:
        if name not in receivers:
            continue
        channel = f"alert:{name}"[:50]
        key = idempotency_key(event_key, channel)
        rows.append(
            Notification(
                event_key=event_key,
                channel=channel,
                kind=ACTIONS[action],
                run_id="",
                alert=alert,
                subject=f"[runledger] {action}: {alert.summary}"[:300],
                payload={**payload, "idempotency_key": key},
                idempotency_key=key,
                next_attempt_at=now,
                created_at=now,
            )
        )
    return len(Notification.objects.bulk_create(rows, ignore_conflicts=True))


@dataclass(frozen=True)
class Acked:
    alert: Alert
    changed: bool
    taken: list[str]  # the runs the person is on now ("I'm on it")
    held: list[str]  # the runs someone else was on already (left to them)


def alert_acknowledge(
    *,
    alert_id: int,
    by: Actor,
    rule: Rule | None,
    receivers: Mapping[str, Receiver],
    clock: Clock = timezone.now,
) -> Acked:
    """``by`` acknowledges the incident: it stops paging (the receivers are told) and ``by`` is
    on each run it covers that nobody else is on ("I'm on it", each audited as a take). A
    second acknowledgement changes nothing and pages nothing, whoever sends it; a resolved
    incident cannot be acknowledged."""
    name = actor_name(by)
    now = clock()
    with transaction.atomic():
        alert = Alert.objects.select_for_update().filter(pk=alert_id).first()
        if alert is None:
            raise InvalidInput(f"no alert {alert_id}")
        if alert.status == AlertStatus.RESOLVED:
            when = f" at {alert.resolved_at:%Y-%m-%d %H:%M %Z}" if alert.resolved_at else ""
            raise NotAllowed(f"alert {alert_id} was resolved{when}: its condition cleared")
        if alert.status == AlertStatus.ACKNOWLEDGED:
            return Acked(alert=alert, changed=False, taken=[], held=[])
        before = {"status": alert.status, "acked_by": ""}
        Alert.objects.filter(pk=alert.pk).update(
            status=AlertStatus.ACKNOWLEDGED, acked_by=name, acked_at=now, version=F("version") + 1
        )
        alert.refresh_from_db()
        record(
            by=name,
            action=AuditAction.ALERT_ACK,
            at=now,
            before=before,
            after={
                "alert": alert.pk,
                "rule": alert.rule,
                "scope": alert.scope,
                "status": alert.status,
                "run_ids": alert.run_ids,
            },
            reason=f"acknowledged {alert.summary}"[:4000],
        )
        _page(alert, rule, "acknowledge", receivers, now)
    signals.send_notifications_queued_on_commit()
    taken, held = [], []
    for run_id in alert.run_ids:
        try:
            _, _changed = run_take(run_id=run_id, by=name, seen_holder="", clock=clock)
        except (Conflict, InvalidInput):
            held.append(run_id)  # someone is on it already, or the run is gone
            continue
        except OperationError:
            held.append(run_id)
            continue
        taken.append(run_id)
    return Acked(alert=alert, changed=True, taken=taken, held=held)
