"""Helpers shared by the ledger's tests."""

from __future__ import annotations

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
