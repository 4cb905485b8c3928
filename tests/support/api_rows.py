"""What a refused API request must leave as it was: the ledger's row counts, how many runs left
the queued state, and the versions of the rows a decision changes in place (gates, pauses,
subscriptions, steps, schedules)."""

from __future__ import annotations

from django.db.models import Sum, Value
from django.db.models.functions import Coalesce

from ledger.models import (
    AuditEvent,
    Gate,
    MailboxEvent,
    Notification,
    Pause,
    Run,
    Schedule,
    Settlement,
    Step,
    WebhookSubscription,
)


def ledger_rows() -> tuple[object, ...]:
    return (
        Run.objects.count(),
        Step.objects.count(),
        Settlement.objects.count(),
        AuditEvent.objects.count(),
        Run.objects.exclude(status="queued").count(),
        Run.objects.aggregate(v=Coalesce(Sum("version"), Value(0)))["v"],
        Step.objects.aggregate(v=Coalesce(Sum("version"), Value(0)))["v"],
        Gate.objects.count(),
        Gate.objects.aggregate(v=Coalesce(Sum("version"), Value(0)))["v"],
        Pause.objects.count(),
        Pause.objects.filter(lifted_at__isnull=False).count(),
        WebhookSubscription.objects.count(),
        WebhookSubscription.objects.filter(removed_at__isnull=False).count(),
        Notification.objects.count(),
        MailboxEvent.objects.count(),
        Schedule.objects.count(),
        Schedule.objects.filter(paused_at__isnull=False).count(),
        Schedule.objects.filter(removed_at__isnull=False).count(),
    )


#: ``ledger_rows()`` of an empty ledger.
EMPTY = (0,) * 18
