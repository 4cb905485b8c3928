"""A step's failed attempts as people read them: the ``show_run`` command, the run page and the
HTTP API take them from here. Each attempt's exception type, message, capped traceback and what
happened next (retried at a time, or given up and why), from ``Step.errors``
(written by ``ledger.engine.failures``; entries written before those fields existed give their
text as the message)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger.models import Step


@dataclass(frozen=True)
class AttemptFailure:
    """One failed attempt of one step."""

    step_id: str
    attempt: int | None
    at: datetime | None
    type: str
    message: str
    traceback: str
    #: When the next attempt is (or was) due; None when the step gave up after this one.
    retry_at: datetime | None = None
    #: The seconds the tool asked to wait (``RetryAfter``), if it did.
    retry_after: float | None = None
    final: bool = False
    why: str = ""

    @property
    def wait_seconds(self) -> float | None:
        if self.retry_at is None or self.at is None:
            return None
        return (self.retry_at - self.at).total_seconds()

    def as_dict(self) -> dict[str, Any]:
        """The attempt as JSON-ready values (times as ISO text), for the API and exports."""
        return {
            "step_id": self.step_id,
            "attempt": self.attempt,
            "at": self.at.isoformat() if self.at else None,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "retry_at": self.retry_at.isoformat() if self.retry_at else None,
            "retry_after": self.retry_after,
            "final": self.final,
            "why": self.why,
        }


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def attempt_failures(step_id: str, errors: Any) -> list[AttemptFailure]:
    """The failed attempts recorded in one step's ``errors``, oldest first."""
    out: list[AttemptFailure] = []
    for entry in errors if isinstance(errors, list) else []:
        if not isinstance(entry, dict):
            out.append(AttemptFailure(step_id, None, None, "", str(entry), ""))
            continue
        text = str(entry.get("error", ""))
        kind, _, rest = text.partition(": ")
        attempt = entry.get("attempt")
        retry_after = entry.get("retry_after")
        out.append(
            AttemptFailure(
                step_id=step_id,
                attempt=attempt if isinstance(attempt, int) else None,
                at=_time(entry.get("at")),
                type=str(entry.get("type") or (kind if rest else "")),
                message=str(entry.get("message", rest if rest else text)),
                traceback=str(entry.get("traceback", "")),
                retry_at=_time(entry.get("retry_at")),
                retry_after=retry_after if isinstance(retry_after, int | float) else None,
                final=bool(entry.get("final", False)),
                why=str(entry.get("why", "")),
            )
        )
    return out


def run_failures(*, run_id: str) -> dict[str, list[AttemptFailure]]:
    """Every step of the run with a failed attempt, in the order the steps first ran."""
    rows = (
        Step.objects.filter(run_id=run_id)
        .exclude(errors=[])
        .order_by("seq", "pk")
        .values_list("step_id", "errors")
    )
    return {
        step_id: fails for step_id, errors in rows if (fails := attempt_failures(step_id, errors))
    }
