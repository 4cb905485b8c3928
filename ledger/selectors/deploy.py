"""Reads of the deploy check (``ledger.processes.deploy_check``): the runs in flight, the tools a
run used."""

from __future__ import annotations

from ledger.models import Run, RunStatus, Step, StepKind

UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.NEEDS_ATTENTION, RunStatus.PAUSED)
TOOL_KINDS = (StepKind.READ, StepKind.EFFECT, StepKind.PURE)


def runs_in_flight(*, agent: str | None = None, limit: int) -> list[tuple[str, str, str]]:
    """(run id, agent, status) of the unfinished runs, oldest first, at most ``limit``."""
    runs = Run.objects.filter(status__in=UNFINISHED).order_by("created_at", "run_id")
    if agent:
        runs = runs.filter(agent=agent)
    return list(runs.values_list("run_id", "agent", "status")[:limit])


def tools_used(run_id: str) -> set[str]:
    """The names of the tools (not model or clock calls) a run's ledger holds rows of."""
    rows = Step.objects.filter(run_id=run_id, kind__in=TOOL_KINDS)
    return set(rows.values_list("tool", flat=True).distinct())
