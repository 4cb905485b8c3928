"""The reads of approval gates: the engine's look-up of a step's gate, the Approvals queue, one
gate with its run."""

from __future__ import annotations

from collections.abc import Collection

from django.db.models import QuerySet

from ledger.models import Gate, GateStatus
from ledger.selectors.runs import scoped


def gate_latest(*, run_id: str, step_id: str) -> Gate | None:
    """The step's newest gate (one indexed query; the engine asks only for gated calls)."""
    return Gate.objects.filter(run_id=run_id, step_id=step_id).order_by("-pk").first()


def gate_queue(
    *, limit: int = 100, offset: int = 0, teams: Collection[str] | None = None
) -> list[Gate]:
    """The gates waiting for a decision, oldest first, with their runs (of ``teams``; None:
    every team)."""
    waiting = scoped(Gate.objects.filter(status=GateStatus.WAITING), teams, field="run__team")
    rows = waiting.select_related("run").order_by("created_at", "pk")
    return list(rows[offset : offset + limit])


def gates_of_run(run_id: str) -> QuerySet[Gate]:
    return Gate.objects.filter(run_id=run_id).order_by("pk")


def gate_get(pk: int) -> Gate | None:
    return Gate.objects.select_related("run").filter(pk=pk).first()
