"""The engine's read: a run's whole ledger in one query, decoded the same on both databases."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.utils.dateparse import parse_datetime

from ledger import canonical
from ledger.engine import collector
from ledger.states import StepRow

_STEP_COLUMNS = (
    "id, step_id, input_hash, status, result, next_step_id, attempt, effect_key, kind, tool, "
    "seq, errors, expires_at, settled_by"
)


def load_steps(run_id: str) -> dict[str, StepRow]:
    """The run's whole ledger in one query, by step id.

    The columns come in ``StepRow``'s field order and each row is built positionally: a
    10,000-step resume or dry replay builds 10,000 of them (keywords cost ~1 µs a row more).
    """
    with connection.cursor() as cur:
        cur.execute(f"SELECT {_STEP_COLUMNS} FROM ledger_step WHERE run_id = %s", [run_id])
        rows = cur.fetchall()
    load, when = _load_json, _load_dt
    with collector.held_off():  # the rows' objects live on: nothing to collect
        return {
            r[1]: StepRow(
                r[0],
                r[1],
                r[2],
                r[3],
                load(r[4]),
                r[5],
                r[6],
                r[7],
                r[8],
                r[9],
                r[10],
                load(r[11]) or [],
                when(r[12]),
                r[13] or "",
            )
            for r in rows
        }


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
    if type(value) is datetime and value.tzinfo is not None:
        return value
    parsed = value if isinstance(value, datetime) else parse_datetime(value)
    if parsed is not None and parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed
