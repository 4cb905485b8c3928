"""What the operator commands share: JSON parsing with clear errors, and the inline worker."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ledger import worker


class _Constant(ValueError):
    pass


def _no_constants(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON (and PostgreSQL's jsonb) do not.
    raise _Constant(f"{name} is not a JSON value")


def parse_json(text: str, *, what: str) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constants)
    except _Constant as exc:
        raise CommandError(f"{what} is not valid JSON: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno}: {text[:80]!r}"
        ) from exc


def execute_inline(run_id: str, out: OutputWrapper) -> None:
    """Execute the run in this process, as a worker would (lease, heartbeat, fencing)."""
    name = f"inline:{socket.gethostname()}/pid:{os.getpid()}"
    outcome = worker.run_execute(run_id=run_id, worker=name)
    if outcome is None:
        raise CommandError(
            f"run {run_id} is not claimable: it is finished or another worker holds its lease"
        )
    out.write(
        f"run {run_id}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else "")
    )
    if outcome.detail:
        out.write(f"  {outcome.detail}")
    if outcome.result is not None:
        out.write("  result: " + json.dumps(outcome.result, sort_keys=True))
