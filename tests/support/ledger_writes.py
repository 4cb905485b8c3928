"""Helpers shared by the ledger's tests."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any


def read_write(*, run_id: str, token: str, step_id: str, now: datetime, result_json: str) -> Any:
    """A finished read step's write as the engine sends it, for fencing tests."""
    from ledger import transitions

    return transitions.StepWrite(
        run_id=run_id,
        token=token,
        step_id=step_id,
        status="succeeded",
        kind="read",
        tool="t",
        seq=1,
        input_hash="0" * 64,
        inputs_json="{}",
        inputs_truncated=False,
        attempt=1,
        now=now,
        result_json=result_json,
        finished=True,
    )


def wait_for_lock_waiters(count: int, *, timeout: float = 120) -> None:
    """Until ``count`` connections wait for a lock (a condition, not a timing; PostgreSQL)."""
    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cur.fetchone()[0] >= count:
                return
        time.sleep(0.01)
    raise AssertionError(f"{count} connections never queued behind the lock")
