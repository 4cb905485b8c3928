"""What a refused API request must leave as it was: the ledger's row counts, and how many runs
left the queued state."""

from __future__ import annotations

from ledger.models import AuditEvent, Run, Settlement, Step


def ledger_rows() -> tuple[int, ...]:
    return (
        Run.objects.count(),
        Step.objects.count(),
        Settlement.objects.count(),
        AuditEvent.objects.count(),
        Run.objects.exclude(status="queued").count(),
    )
