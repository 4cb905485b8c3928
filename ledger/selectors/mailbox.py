"""A run's mailbox as the run page shows it: the events sent to it, in the order they arrived."""

from __future__ import annotations

from django.db.models import QuerySet

from ledger.models import MailboxEvent

#: The most events the run page lists (the oldest first; a run's mailbox is rarely longer).
MAILBOX_SHOWN = 200


def mailbox_of_run(*, run_id: str, limit: int = MAILBOX_SHOWN) -> QuerySet[MailboxEvent]:
    """The run's events, oldest first: each with its name, payload, sender and the step that
    took it ("" while it waits)."""
    return MailboxEvent.objects.filter(run_id=run_id).order_by("pk")[:limit]
