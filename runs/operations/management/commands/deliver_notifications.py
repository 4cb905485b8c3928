"""Deliver due notifications now (what the beat task does): `manage.py deliver_notifications`.

Also queues the reminders for long waits. Prints one line per attempt; exit 0 (failures are
retried later with back-off, and listed on the dashboard's Notifications page).
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from ledger import transitions
from ledger.processes import delivery
from runs.operations.commands import OperatorCommand


class Command(OperatorCommand):
    help = "Queue reminders and deliver every due notification (webhook, email) now."

    def handle(self, *args: Any, **options: Any) -> None:
        reminded = transitions.notifications_remind(now=timezone.now())
        done = delivery.deliver_due()
        for d in done:
            self.stdout.write(
                f"notification {d.pk} {d.channel}: " + ("sent" if d.ok else f"failed: {d.error}")
            )
        sent = sum(1 for d in done if d.ok)
        self.stdout.write(f"{reminded} reminder(s) queued; {sent} sent, {len(done) - sent} failed")
