"""The engine's read: a run's whole ledger in one query, decoded the same on both databases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.utils.dateparse import parse_datetime

from ledger import canonical
from ledger.states import StepRow

_STEP_COLUMNS = (
    "id, step_id, input_hash, status, result, next_step_id, attempt, effect_key, kind, tool, "
    "seq, errors, expires_at, settled_by"
)


def load_steps(run_id: str) -> dict[str, StepRow]:
    """The run's whole ledger in one query, by step id."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT {_STEP_COLUMNS} FROM ledger_step WHERE run_id = %s", [run_id])
        rows = cur.fetchall()
    steps = {}
    for r in rows:
        steps[r[1]] = StepRow(
            pk=r[0],
            step_id=r[1],
            input_hash=r[2],
            status=r[3],
            result=_load_json(r[4]),
            next_step_id=r[5],
            attempt=r[6],
            effect_key=r[7],
            kind=r[8],
            tool=r[9],
            seq=r[10],
            errors=_load_json(r[11]) or [],
            expires_at=_load_dt(r[12]),
            settled_by=r[13] or "",
        )
    return steps


def _load_json(value: Any) -> Any:
    """A stored result in the canonical order: the value the first execution handed over."""
    if value is None:
        return None
    if not isinstance(value, str | bytes):
        return canonical.ordered(value)
    return canonical.loads(value)


def _load_dt(value: Any) -> datetime | None:
    """A timestamp from either database, timezone-aware (SQLite hands back naive UTC)."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else parse_datetime(value)
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed
