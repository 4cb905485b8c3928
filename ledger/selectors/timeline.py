"""A run's steps on one time axis (the run page's waterfall): each step's first start and its
end, and each failed attempt's failure time and next start (from ``Step.errors``), for the
first ``limit`` steps in execution order. One query over narrow columns plus ``errors``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ledger.models import Step
from ledger.selectors.failures import attempt_failures

WATERFALL_STEPS = 200


@dataclass(frozen=True)
class Attempt:
    number: int
    start: datetime
    end: datetime | None  # None: still running (or its end was not recorded)
    failed: bool


@dataclass
class WaterfallRow:
    step_id: str
    kind: str
    status: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def start(self) -> datetime | None:
        return self.attempts[0].start if self.attempts else None

    @property
    def end(self) -> datetime | None:
        return self.attempts[-1].end if self.attempts else None


def step_waterfall(*, run_id: str, limit: int = WATERFALL_STEPS) -> tuple[list[WaterfallRow], bool]:
    """The rows, ordered by first start, and whether more steps exist than ``limit``.

    A step's attempts: a failed attempt runs from the time the failure before it said to retry
    (its own failure time for the first: that start is not recorded) to its failure time; the
    last attempt runs from ``started_at`` to ``finished_at`` (None while it runs). Steps never
    started are left out. The limit applies in the order the steps were first written (``seq``:
    a range of the (run, seq) index, however long the run; ordering the whole run by
    ``started_at`` first sorted every row of a 10,000-step run to draw 200).
    """
    rows = list(
        Step.objects.filter(run_id=run_id, started_at__isnull=False)
        .order_by("seq")
        .values_list("step_id", "kind", "status", "started_at", "finished_at", "errors")[
            : limit + 1
        ]
    )
    out = []
    for step_id, kind, status, started, finished, errors in rows[:limit]:
        if started is None:  # filtered out above; for the type checker
            continue
        row = WaterfallRow(step_id=step_id, kind=kind, status=status)
        number, gave_up, retry_at = 1, False, None
        for failure in attempt_failures(step_id, errors):
            if failure.at is None:
                continue
            # ``started_at`` is the last attempt's start; an earlier attempt began when the
            # failure before it said to retry (the first one's start is not recorded: it is
            # drawn from its failure time).
            begin = started if failure.final else (retry_at or failure.at)
            row.attempts.append(Attempt(number, min(begin, failure.at), failure.at, failed=True))
            number, gave_up, retry_at = number + 1, failure.final, failure.retry_at
        if not gave_up:
            row.attempts.append(Attempt(number, started, finished, failed=status == "failed"))
        out.append(row)
    out.sort(key=lambda r: r.attempts[0].start)
    return out, len(rows) > limit
