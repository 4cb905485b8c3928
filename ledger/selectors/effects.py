"""Reads of the effect audit (``ledger.processes.effect_audit``): the ledger's effects by key, in
order."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import QuerySet

from ledger.models import EffectAudit, EffectAuditFinding, Step, StepKind, StepStatus

#: The statuses the audit compares (a started effect is the settlement queue's, not the audit's).
AUDITED = (StepStatus.SUCCEEDED, StepStatus.FAILED, StepStatus.ABANDONED)


def effect_rows(
    *, agent: str | None, since: datetime | None, after: int, limit: int
) -> QuerySet[Step]:
    """Effect rows with a key, in row order after ``after`` (the audit's cursor), at most
    ``limit``: ``pk``, run, step id, tool, status, key and result only."""
    rows = Step.objects.filter(
        kind=StepKind.EFFECT, status__in=AUDITED, effect_key__isnull=False, pk__gt=after
    ).exclude(effect_key="")
    if agent:
        rows = rows.filter(run__agent=agent)
    if since is not None:
        rows = rows.filter(updated_at__gte=since)
    fields = ("pk", "run_id", "step_id", "tool", "status", "effect_key", "result")
    return rows.order_by("pk").only(*fields)[:limit]


def known_effect_keys(keys: Iterable[str]) -> set[str]:
    """Which of ``keys`` the ledger holds as an effect key (any status)."""
    wanted = list(keys)
    found: set[str] = set()
    for start in range(0, len(wanted), 1000):
        chunk = wanted[start : start + 1000]
        found |= set(Step.objects.filter(effect_key__in=chunk).values_list("effect_key", flat=True))  # type: ignore[arg-type]
    return found


def effect_audits() -> QuerySet[EffectAudit]:
    return EffectAudit.objects.order_by("-created_at", "-id")


def findings_for_run(*, run_id: str) -> QuerySet[EffectAuditFinding]:
    """The effect audits' findings that name a run, newest audit first."""
    return (
        EffectAuditFinding.objects.filter(run_id=run_id)
        .select_related("audit")
        .order_by("-audit__created_at", "id")
    )
