"""What the operator commands share: JSON parsing with clear errors, and the inline worker."""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ledger import worker
from ledger.errors import InvalidInput
from ledger.inputs import parse_json_text, parse_whole_number, queryable


def parse_json(text: str, *, what: str) -> Any:
    """JSON from a command-line argument, or ``CommandError`` saying what is wrong with it
    (syntax, NaN, too deep, too long a number, a NUL byte: ``ledger.inputs``)."""
    try:
        return parse_json_text(text, what=what)
    except InvalidInput as exc:
        raise CommandError(f"{exc}: {text[:80]!r}") from None


def whole_number(lo: int = 0, hi: int = 100_000) -> Callable[[str], int]:
    """An argparse type: a whole number in [lo, hi] (never a 5,000-digit ``int()``)."""

    def parse(text: str) -> int:
        try:
            return parse_whole_number(text, what="the value", lo=lo, hi=hi)
        except InvalidInput as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def text_arg(text: str) -> str:
    """An argparse type: text the database can take (no NUL byte, no lone surrogate)."""
    if not queryable(text):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} contains a NUL byte or bad Unicode")
    return text


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
