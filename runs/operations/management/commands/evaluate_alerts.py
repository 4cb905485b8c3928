"""Evaluate the alert rules and deliver their pages now (what the beat task ``runledger.alerts``
does): `runledger evaluate_alerts`. Prints what opened and resolved, and one line per delivery
attempt; exit 0 (a failed page is retried later with back-off, and listed on the Notifications
page)."""

from __future__ import annotations

from typing import Any

from ledger.processes import alerting, delivery
from runs.operations.commands import OperatorCommand


class Command(OperatorCommand):
    help = "Evaluate the alert rules (RUNLEDGER_ALERT_RULES) and deliver their pages now."

    def handle(self, *args: Any, **options: Any) -> None:
        done = alerting.alerts_evaluate()
        for key in done.opened:
            self.stdout.write(f"opened {key}")
        for key in done.resolved:
            self.stdout.write(f"resolved {key}")
        sent = delivery.deliver_due()
        for d in sent:
            self.stdout.write(
                f"notification {d.pk} {d.channel}: " + ("sent" if d.ok else f"failed: {d.error}")
            )
        ok = sum(1 for d in sent if d.ok)
        self.stdout.write(
            f"{len(done.opened)} opened, {done.kept} still open, {len(done.resolved)} resolved; "
            f"{ok} sent, {len(sent) - ok} failed"
        )
