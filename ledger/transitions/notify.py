"""The notification outbox: rows written in the transaction of the event they announce, then
claimed, marked sent, or failed with back-off by a deliverer (``ledger.processes.delivery``).

Events: a run entered needs_attention (``run_block`` calls ``notify_run_blocked``), a settlement
proposal waits for an approver (``settlement_propose``), and either has waited longer than
``RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS`` (``notifications_remind``, from the beat task).
Completion events go to the applications' subscriptions (``notify_run_event``, called by every
transition that ends or stops a run: finish, block, cancel, an admin's status edit), one row per
subscription, whose channel is ``subscription:<id>``.
``(event_key, channel)`` is unique and inserts ignore conflicts: one event, one row per channel,
however often the code that records it runs. A claim lasts ``claim_seconds``: a deliverer that
dies mid-send leaves the row to be claimed again after that and sent again under the same
idempotency key (the receiver recognises it). Channels are those configured in the settings.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q

from ledger import canonical, signals
from ledger.conf import conf
from ledger.models import (
    DeliveryStatus,
    Gate,
    Notification,
    NotificationKind,
    Run,
    RunStatus,
    Settlement,
    SettlementStatus,
    WebhookSubscription,
)
from ledger.transitions.gate_links import gate_link_token

DETAIL_CHARS = 500
REMIND_BATCH = 500


def channels() -> list[str]:
    """The configured channels: ``webhook`` and/or ``email``; none by default."""
    found = []
    if conf.RUNLEDGER_NOTIFY_WEBHOOK_URL:
        found.append("webhook")
    if conf.RUNLEDGER_NOTIFY_EMAIL_TO:
        found.append("email")
    return found


def idempotency_key(event_key: str, channel: str) -> str:
    return hashlib.sha256(f"{event_key}|{channel}".encode()).hexdigest()[:40]


def _run_url(run_id: str) -> str:
    return f"{conf.RUNLEDGER_PUBLIC_URL.rstrip('/')}/runs/{run_id}/"


def _queue(
    *,
    event_key: str,
    kind: str,
    run: Run,
    subject: str,
    payload: dict[str, Any],
    at: datetime,
    settlement: Settlement | None = None,
    waiting_since: datetime | None = None,
    announce: bool = True,
) -> int:
    """One row per configured channel (call inside the event's transaction); ``announce``:
    tell the deliverers after the commit (a caller queueing many rows tells them once)."""
    names = channels()
    if not names:
        return 0
    rows = []
    for channel in names:
        key = idempotency_key(event_key, channel)
        rows.append(
            Notification(
                event_key=event_key[:200],
                channel=channel,
                kind=kind,
                run_id=run.run_id,
                settlement_id=settlement.pk if settlement else None,
                waiting_since=waiting_since,
                subject=subject[:300],
                payload={**payload, "idempotency_key": key, "event_key": event_key},
                idempotency_key=key,
                next_attempt_at=at,
                created_at=at,
            )
        )
    created = Notification.objects.bulk_create(rows, ignore_conflicts=True)
    if announce:
        signals.send_notifications_queued_on_commit()
    return len(created)


def _run_payload(run: Run, kind: str) -> dict[str, Any]:
    return {
        "event": kind,
        "run_id": run.run_id,
        "title": run.title,
        "agent": run.agent,
        "status": run.status,
        "reason": run.reason,
        "step_id": run.blocked_step_id,
        "detail": run.detail[:DETAIL_CHARS],
        "url": _run_url(run.run_id),
    }


def _name(run: Run) -> str:
    return run.title or f"{run.agent} {run.run_id}"


def notify_run_blocked(*, run_id: str, at: datetime, question_step: str = "") -> int:
    """A run entered needs_attention (call in the transaction that blocked it).

    Each stop is its own event, except a question's (``ctx.ask``, ``question_step`` its step):
    keyed by the question, so a run that stops on the same question again (resumed by hand
    before anyone answered, replayed after a crash) tells nobody twice."""
    if not channels():
        return 0
    run = Run.objects.get(pk=run_id)
    stop = f"question:{question_step}" if question_step else run.status_changed_at.isoformat()
    return _queue(
        event_key=f"needs_attention:{run.run_id}:{stop}",
        kind=NotificationKind.NEEDS_ATTENTION,
        run=run,
        subject=f"[runledger] needs a person: {_name(run)} ({run.reason})",
        payload=_run_payload(run, NotificationKind.NEEDS_ATTENTION),
        at=at,
        waiting_since=run.status_changed_at,
    )


def notify_settlement_waiting(*, settlement: Settlement, run: Run, at: datetime) -> int:
    """A proposal waits for an approver (call in the transaction that proposed it)."""
    payload = _run_payload(run, NotificationKind.APPROVAL_WAITING) | {
        "step_id": settlement.step_id,
        "settlement": {
            "id": settlement.pk,
            "outcome": settlement.outcome,
            "proposed_by": settlement.proposed_by_name,
            "reason": settlement.reason[:DETAIL_CHARS],
        },
    }
    return _queue(
        event_key=f"approval_waiting:{settlement.pk}",
        kind=NotificationKind.APPROVAL_WAITING,
        run=run,
        settlement=settlement,
        subject=(
            f"[runledger] approval wanted: {settlement.get_outcome_display()} for "
            f"{settlement.step_id} of {_name(run)}, proposed by {settlement.proposed_by_name}"
        ),
        payload=payload,
        at=at,
        waiting_since=settlement.created_at,
    )


# --- completion events to subscribed applications ----------------------------------------------

#: The event each status a transition leaves a run in announces.
EVENT_OF_STATUS = {
    RunStatus.SUCCEEDED: NotificationKind.RUN_SUCCEEDED,
    RunStatus.FAILED: NotificationKind.RUN_FAILED,
    RunStatus.CANCELLED: NotificationKind.RUN_CANCELLED,
    RunStatus.NEEDS_ATTENTION: NotificationKind.RUN_NEEDS_ATTENTION,
}
ERROR_CHARS = 4000


def message_id(idempotency_key: str) -> str:
    """The ``webhook-id`` of a completion event: the same on every attempt."""
    return f"msg_{idempotency_key}"


def notify_run_event(*, run_id: str, at: datetime) -> int:
    """Queue the completion event of the status ``run_id`` is in now (succeeded, failed,
    cancelled, needs_attention) for every live subscription that wants it: the run's own
    (per run) and its agent's (a team's subscription to an agent: when the run is of that
    team). Call it in the transaction that changed the status, after the
    change: the event is written with it or not at all. One query when nobody subscribed.
    An event already queued is not queued twice (``(event_key, channel)`` is unique, and the
    key names the run's version). Returns the number of subscriptions it was offered to.
    """
    of_run = Run.objects.filter(pk=run_id)
    subscriptions = list(
        WebhookSubscription.objects.filter(removed_at__isnull=True).filter(
            Q(run_id=run_id)
            | (
                Q(agent__in=of_run.values("agent"))
                & (Q(team="") | Q(team__in=of_run.values("team")))
            )
        )
    )
    if not subscriptions:
        return 0
    run = Run.objects.get(pk=run_id)
    event = EVENT_OF_STATUS.get(RunStatus(run.status))
    wanted = [s for s in subscriptions if event is not None and event in s.events]
    if event is None or not wanted:
        return 0
    event_key = f"{event}:{run.run_id}:{run.version}"  # one per change of the run's state
    body = event_body(run, event=event, at=at)
    rows = []
    for subscription in wanted:
        channel = f"subscription:{subscription.pk}"
        rows.append(
            Notification(
                event_key=event_key,
                channel=channel,
                kind=event,
                run_id=run.run_id,
                subscription=subscription,
                subject=f"[runledger] {event}: {_name(run)}"[:300],
                payload=body,
                idempotency_key=idempotency_key(event_key, channel),
                next_attempt_at=at,
                created_at=at,
            )
        )
    created = Notification.objects.bulk_create(rows, ignore_conflicts=True)
    signals.send_notifications_queued_on_commit()
    return len(created)


def event_body(run: Run, *, event: str, at: datetime) -> dict[str, Any]:
    """The JSON an application receives (the Standard Webhooks shape: type, timestamp, data)."""
    base = conf.RUNLEDGER_PUBLIC_URL.rstrip("/")
    data: dict[str, Any] = {
        "run_id": run.run_id,
        "agent": run.agent,
        "title": run.title,
        "labels": run.labels,
        "status": run.status,
        "reason": run.reason,
        "step_id": run.blocked_step_id,
        "detail": run.detail[:DETAIL_CHARS],
        "result": None,
        "error": run.error[:ERROR_CHARS],
        "resume_count": run.resume_count,
        "parent_run_id": run.parent_id or "",
        "created_at": _iso(run.created_at),
        "status_changed_at": _iso(run.status_changed_at),
        "finished_at": _iso(run.finished_at),
        "links": {"dashboard": _run_url(run.run_id), "api": f"{base}/api/v1/runs/{run.run_id}"},
    }
    if run.result is not None:
        size = len(canonical.canonical(run.result)[1].encode())
        if size <= conf.RUNLEDGER_EVENT_MAX_RESULT_BYTES:
            data["result"] = run.result
        else:
            data["result_omitted"] = f"{size} bytes of JSON; read it from the API"
        continued = run.result.get("continued_as") if isinstance(run.result, dict) else None
        if continued and run.children.filter(pk=continued, parent_kind="continue").exists():
            data["continued_as"] = continued  # the work goes on in that run
    return {"type": event, "timestamp": _iso(at), "data": data}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


#: Links in one gate's notification at most (one per approver).
GATE_LINKS = 20


def notify_gate_waiting(*, gate: Gate, run: Run, at: datetime) -> int:
    """An effect waits at an approval gate (call in the transaction that opened it): once per
    gate. The payload holds the exact arguments, their digest, and a signed single-use link per
    person holding RUNLEDGER_APPROVER_PERMISSION (each still needs that person signed in)."""
    if not channels():
        return 0
    base = conf.RUNLEDGER_PUBLIC_URL.rstrip("/")
    names = [user.get_username() for user in _approvers()]
    links = {
        name: f"{base}/approvals/link/{gate_link_token(gate=gate, username=name)}/"
        for name in names
    }
    payload = _run_payload(run, NotificationKind.GATE_WAITING) | {
        "step_id": gate.step_id,
        "gate": {
            "id": gate.pk,
            "tool": gate.tool,
            "arguments": gate.arguments_text[: DETAIL_CHARS * 8],
            "digest": gate.digest,
            "approvers_required": gate.approvers_required,
            "expires_at": gate.expires_at.isoformat(),
            "url": f"{base}/approvals/{gate.pk}/",
            "links": links,
        },
    }
    return _queue(
        event_key=f"gate_waiting:{gate.pk}",
        kind=NotificationKind.GATE_WAITING,
        run=run,
        subject=f"[runledger] approval wanted: {gate.tool} ({gate.step_id}) of {_name(run)}",
        payload=payload,
        at=at,
        waiting_since=gate.created_at,
    )


def _approvers() -> list[Any]:
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.with_perm(  # type: ignore[attr-defined]
        conf.RUNLEDGER_APPROVER_PERMISSION,
        is_active=True,
        backend="django.contrib.auth.backends.ModelBackend",  # groups and user permissions
    )
    return list(users.order_by("pk")[:GATE_LINKS])


def notifications_remind(*, now: datetime) -> int:
    """Queue one reminder for each run that has needed attention, and each proposal that has
    waited, longer than ``RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS`` (0: no reminders)."""
    age = conf.RUNLEDGER_NOTIFY_REMIND_AFTER_SECONDS
    if age <= 0 or not channels():
        return 0
    cutoff = now - timedelta(seconds=age)
    reminded = Notification.objects.filter(kind=NotificationKind.REMINDER)
    runs = (
        Run.objects.filter(status=RunStatus.NEEDS_ATTENTION, status_changed_at__lte=cutoff)
        .exclude(
            Exists(
                reminded.filter(run_id=OuterRef("pk"), waiting_since=OuterRef("status_changed_at"))
            )
        )
        .order_by("status_changed_at")[:REMIND_BATCH]
    )
    count = 0
    for run in runs:
        with transaction.atomic():
            count += _queue(
                event_key=f"reminder:{run.run_id}:{run.status_changed_at.isoformat()}",
                kind=NotificationKind.REMINDER,
                run=run,
                subject=f"[runledger] still needs a person: {_name(run)} ({run.reason})",
                payload=_run_payload(run, NotificationKind.REMINDER) | {"waiting": "run"},
                at=now,
                waiting_since=run.status_changed_at,
                announce=False,
            )
    waiting = (
        Settlement.objects.filter(status=SettlementStatus.PROPOSED, created_at__lte=cutoff)
        .exclude(Exists(reminded.filter(settlement_id=OuterRef("pk"))))
        .select_related("run")
        .order_by("created_at")[:REMIND_BATCH]
    )
    for s in waiting:
        with transaction.atomic():
            count += _queue(
                event_key=f"reminder:approval:{s.pk}",
                kind=NotificationKind.REMINDER,
                run=s.run,
                settlement=s,
                subject=f"[runledger] still waiting for approval: {s.step_id} of {_name(s.run)}",
                payload=_run_payload(s.run, NotificationKind.REMINDER)
                | {"waiting": "approval", "settlement": {"id": s.pk, "outcome": s.outcome}},
                at=now,
                waiting_since=s.created_at,
                announce=False,
            )
    if count:
        # Once for the batch: each announcement enqueues a delivery task (runs.operations.tasks).
        signals.send_notifications_queued_on_commit()
    return count


# --- delivery state --------------------------------------------------------------------------


def notification_claim(*, now: datetime, claim_seconds: float = 60.0) -> Notification | None:
    """Claim the oldest due notification (pending and due, or a claim that lapsed): a
    compare-and-set on its status and token; None when nothing is due. An alert's page waits
    while an earlier page of the same incident to the same receiver is unsent (a resolve never
    overtakes its trigger on a retry)."""
    due = Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=DeliveryStatus.SENDING, claimed_until__lt=now
    )
    earlier = Notification.objects.filter(
        alert_id=OuterRef("alert_id"),
        channel=OuterRef("channel"),
        id__lt=OuterRef("id"),
        status__in=(DeliveryStatus.PENDING, DeliveryStatus.SENDING),
    )
    waiting = Q(alert__isnull=False) & Exists(earlier)
    candidates = Notification.objects.filter(due).exclude(waiting)
    for candidate in candidates.order_by("next_attempt_at", "id")[:5]:
        token = secrets.token_hex(16)
        claimed = Notification.objects.filter(
            pk=candidate.pk, status=candidate.status, claim_token=candidate.claim_token
        ).update(
            status=DeliveryStatus.SENDING,
            claim_token=token,
            claimed_until=now + timedelta(seconds=claim_seconds),
            attempts=F("attempts") + 1,
        )
        if claimed == 1:
            return Notification.objects.get(pk=candidate.pk)
    return None


def notification_sent(*, pk: int, token: str, now: datetime) -> bool:
    """Mark a claimed notification sent; False when the claim was lost (another deliverer)."""
    return (
        Notification.objects.filter(pk=pk, claim_token=token, status=DeliveryStatus.SENDING).update(
            status=DeliveryStatus.SENT, sent_at=now, claimed_until=None, last_error=""
        )
        == 1
    )


def notification_failed(
    *, pk: int, token: str, error: str, now: datetime, final: bool = False
) -> bool:
    """Record a failed attempt: pending again after an exponential back-off (base
    RUNLEDGER_NOTIFY_BACKOFF_SECONDS, doubling, capped at an hour), or failed for good after
    RUNLEDGER_NOTIFY_MAX_ATTEMPTS attempts (or at once when ``final``: trying again cannot
    help, e.g. the subscription was removed)."""
    row = Notification.objects.filter(pk=pk, claim_token=token).only("attempts").first()
    if row is None:
        return False
    give_up = final or row.attempts >= conf.RUNLEDGER_NOTIFY_MAX_ATTEMPTS
    delay = min(conf.RUNLEDGER_NOTIFY_BACKOFF_SECONDS * 2 ** (row.attempts - 1), 3600.0)
    return (
        Notification.objects.filter(pk=pk, claim_token=token, status=DeliveryStatus.SENDING).update(
            status=DeliveryStatus.FAILED if give_up else DeliveryStatus.PENDING,
            next_attempt_at=now + timedelta(seconds=delay),
            claimed_until=None,
            last_error=error[:2000],
        )
        == 1
    )
