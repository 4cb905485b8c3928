"""Tokens and cost: per run (the run page, the lists, the API) and per agent over a window
(Trends, ``GET /api/v1/agents/usage``), summed from the model steps' own columns
(``Step.tokens_in``, ``tokens_out``, ``cost_usd``; ``ledger.usage`` fills them as a step is
recorded).

A run's figures count every model step it recorded, abandoned ones included (a replanned
branch's answers were paid for); a fork counts only the steps it executed itself (the copied
path's rows carry no usage). ``cost_usd`` sums the steps whose model has a price and is ``None``
when none has; ``unpriced`` says how many model steps have tokens but no price.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Count, Q, Sum

from ledger.models import Step, StepKind
from ledger.selectors.runs import scoped


@dataclass(frozen=True)
class Usage:
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: Decimal | None = None
    model_steps: int = 0
    unpriced: int = 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def as_dict(self) -> dict[str, object]:
        return {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": float(self.cost_usd) if self.cost_usd is not None else None,
            "model_steps": self.model_steps,
            "unpriced": self.unpriced,
        }


NONE = Usage()


@dataclass(frozen=True)
class AgentUsage:
    agent: str
    runs: int
    usage: Usage


_SUMS = {
    "tokens_in_sum": Sum("tokens_in"),
    "tokens_out_sum": Sum("tokens_out"),
    "cost_sum": Sum("cost_usd"),
    "steps": Count("id"),
    "unpriced": Count(
        "id",
        filter=Q(cost_usd__isnull=True)
        & (Q(tokens_in__isnull=False) | Q(tokens_out__isnull=False)),
    ),
}


def _usage(row: Mapping[str, Any]) -> Usage:
    return Usage(
        tokens_in=int(row["tokens_in_sum"] or 0),
        tokens_out=int(row["tokens_out_sum"] or 0),
        cost_usd=row["cost_sum"],
        model_steps=int(row["steps"]),
        unpriced=int(row["unpriced"]),
    )


def usage_of_runs(*, run_ids: Iterable[str]) -> dict[str, Usage]:
    """{run id: its usage} for the runs named; a run without model steps is absent (one query,
    on the partial index of model steps per run)."""
    ids = list(run_ids)
    if not ids:
        return {}
    rows = (
        Step.objects.filter(run_id__in=ids, kind=StepKind.MODEL)
        .order_by()
        .values("run_id")
        .annotate(**_SUMS)
    )
    return {str(r["run_id"]): _usage(r) for r in rows}


def usage_of_run(*, run_id: str) -> Usage:
    return usage_of_runs(run_ids=[run_id]).get(run_id, NONE)


def usage_by_agent(
    *, since: datetime, until: datetime, teams: Collection[str] | None = None
) -> tuple[list[AgentUsage], AgentUsage]:
    """Per agent, the model steps recorded (finished) in [since, until), most costly first, and
    the total over all agents (of the runs of ``teams``; None: every team). Reads the partial
    index of model steps with usage."""
    steps = Step.objects.filter(
        kind=StepKind.MODEL,
        tokens_in__isnull=False,
        finished_at__gte=since,
        finished_at__lt=until,
    )
    steps = scoped(steps, teams, field="run__team")
    rows = (
        steps.order_by().values("run__agent").annotate(runs=Count("run_id", distinct=True), **_SUMS)
    )
    agents = [AgentUsage(agent=r["run__agent"], runs=r["runs"], usage=_usage(r)) for r in rows]
    agents.sort(key=lambda a: (-(a.usage.cost_usd or 0), -a.usage.tokens, a.agent))
    total = AgentUsage(
        agent="all agents",
        runs=sum(a.runs for a in agents),
        usage=Usage(
            tokens_in=sum(a.usage.tokens_in for a in agents),
            tokens_out=sum(a.usage.tokens_out for a in agents),
            cost_usd=(
                sum((a.usage.cost_usd for a in agents if a.usage.cost_usd is not None), Decimal(0))
                if any(a.usage.cost_usd is not None for a in agents)
                else None
            ),
            model_steps=sum(a.usage.model_steps for a in agents),
            unpriced=sum(a.usage.unpriced for a in agents),
        ),
    )
    return agents, total
