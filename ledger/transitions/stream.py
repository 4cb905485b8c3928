"""The run's stream: the events an agent emits (``ctx.emit``), appended once, fenced.

An event is keyed by the step id of the ``emit`` call that made it (unique per run), the way a
step is: a re-execution after a crash replays the agent from the top, reaches the same ``emit``
with the same step id, and its insert finds the row already there and adds nothing. So an event
is appended exactly once, whatever the number of executions, and its ``id`` (the SSE event id)
never changes. The write is fenced like every engine write: the run row is taken ``FOR SHARE``
with the caller's lease token, so a worker that lost its lease (taken over, cancelled) appends
nothing and gets ``LeaseLost``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from ledger.errors import LeaseLost
from ledger.models import StreamEvent

Clock = Callable[[], datetime]

_FENCE = "SELECT 1 FROM ledger_run WHERE run_id = %s AND lease_token = %s AND status = 'running'"


def stream_append(
    *,
    run_id: str,
    token: str,
    step_id: str,
    kind: str,
    data: Any,
    clock: Clock = timezone.now,
) -> bool:
    """Append the event emitted at ``step_id`` to the run's stream, once; True when this call
    appended it, False when an earlier execution had (a replay). ``LeaseLost`` when the
    caller's lease ``token`` no longer holds the running run: nothing is written."""
    fence = _FENCE + (" FOR SHARE" if connection.vendor == "postgresql" else "")
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute(fence, [run_id, token])
            if cur.fetchone() is None:
                raise LeaseLost(run_id)
        if StreamEvent.objects.filter(run_id=run_id, step_id=step_id).exists():
            return False
        made = StreamEvent.objects.bulk_create(
            [StreamEvent(run_id=run_id, step_id=step_id, kind=kind, data=data, created_at=clock())],
            ignore_conflicts=True,  # two executions cannot hold one lease; belt and braces
        )
    return bool(made)
