"""Pauses: the active ones a worker holds runs by, the list an operator reads, what a lift
would queue, and a run's executions (claim to end)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields
from datetime import datetime

from django.db.models import Count, Q, QuerySet

from ledger.models import Execution, ExecutionEnding, Pause, PauseScope, Run, RunStatus


@dataclass(frozen=True)
class ActivePauses:
    """The pauses that concern one execution: of its run or agent (``whole``), of its tools."""

    whole: Pause | None
    tools: dict[str, Pause]

    def __bool__(self) -> bool:
        return self.whole is not None or bool(self.tools)


def active_pauses(*, run_id: str, agent: str) -> ActivePauses:
    """One query: the active pauses of this run, its agent, and of every tool (an agent may
    call tools it did not declare)."""
    rows = Pause.objects.filter(lifted_at__isnull=True).filter(
        Q(scope=PauseScope.RUN, target=run_id)
        | Q(scope=PauseScope.AGENT, target=agent)
        | Q(scope=PauseScope.TOOL)
    )
    whole: Pause | None = None
    by_tool: dict[str, Pause] = {}
    for pause in rows:
        if pause.scope == PauseScope.TOOL:
            by_tool[pause.target] = pause
        elif whole is None or pause.scope == PauseScope.RUN:
            whole = pause
    return ActivePauses(whole=whole, tools=by_tool)


def active_pauses_of(*, runs: list[tuple[str, str]]) -> dict[str, ActivePauses]:
    """``active_pauses`` of many runs, each ``(run_id, agent)``, in one query (the lease
    renewer's, for every run its process holds)."""
    run_ids = {run_id for run_id, _ in runs}
    agents = {agent for _, agent in runs}
    rows = list(
        Pause.objects.filter(lifted_at__isnull=True).filter(
            Q(scope=PauseScope.RUN, target__in=run_ids)
            | Q(scope=PauseScope.AGENT, target__in=agents)
            | Q(scope=PauseScope.TOOL)
        )
    )
    tools = {p.target: p for p in rows if p.scope == PauseScope.TOOL}
    by_run = {p.target: p for p in rows if p.scope == PauseScope.RUN}
    by_agent = {p.target: p for p in rows if p.scope == PauseScope.AGENT}
    return {
        run_id: ActivePauses(whole=by_run.get(run_id) or by_agent.get(agent), tools=dict(tools))
        for run_id, agent in runs
    }


def pauses_list(*, active: bool = True, teams: Collection[str] | None = None) -> QuerySet[Pause]:
    """Pauses, newest first, each with ``held``: the runs it holds now. With ``teams`` (None:
    every team): the pauses of a tool or an agent (they hold every team's runs) and those of
    the runs of ``teams``; ``held`` counts those teams' runs only."""
    held_q = Q(held_runs__status=RunStatus.PAUSED)
    if teams is not None:
        held_q &= Q(held_runs__team__in=list(teams))
    qs = Pause.objects.annotate(**{"held": Count("held_runs", filter=held_q)})
    if teams is not None:
        runs = Run.objects.filter(team__in=list(teams)).values("run_id")
        qs = qs.filter(~Q(scope=PauseScope.RUN) | Q(target__in=runs))
    return qs.filter(lifted_at__isnull=True) if active else qs


def pause_held(pause_id: int) -> QuerySet[Run]:
    """The runs a lift of ``pause_id`` would queue (count them first)."""
    return Run.objects.filter(status=RunStatus.PAUSED, pause_id=pause_id).order_by("run_id")


@dataclass(frozen=True)
class ExecutionRow:
    number: int
    worker: str
    host: str
    pid: int | None
    task_id: str
    started_at: datetime
    ended_at: datetime | None
    ending: str
    reason: str
    step_id: str
    replayed: int
    executed: int
    error: str

    @property
    def ending_label(self) -> str:
        return str(ExecutionEnding(self.ending).label)

    @property
    def seconds(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


_ROW_FIELDS = [f.name for f in fields(ExecutionRow)]


def run_executions(run_id: str) -> list[ExecutionRow]:
    """A run's executions in order. One still ``running`` behind a later one was taken over
    (a claim over its expired lease) before the sweep saw it: it is shown as crashed."""
    rows = list(Execution.objects.filter(run_id=run_id).order_by("number"))
    last = rows[-1].number if rows else 0
    out = []
    for row in rows:
        ending, error = row.ending, row.error
        if ending == ExecutionEnding.RUNNING and row.number < last:
            ending = ExecutionEnding.CRASHED
            error = error or "no end recorded: a later execution took its expired lease over"
        copied = {name: getattr(row, name) for name in _ROW_FIELDS}
        out.append(ExecutionRow(**{**copied, "ending": ending, "error": error}))
    return out
