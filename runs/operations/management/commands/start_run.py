"""Start a run of a registered agent: `manage.py start_run refund --inputs '{"invoice_id": …}'`.

The inputs are checked before anything is written (JSON, and what the agent ``requires``).
Audited as ``cli:<login>``. Idempotent, through ``ledger.api.start_run``: a repeated
``--run-id`` (or ``--idempotency-key``) with the same agent and inputs prints the existing run;
with other values it is refused, saying what differs. Exit codes: see ``_common``
(``--inline``: 3 unless it succeeds).
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger import api, transitions
from ledger.errors import Conflict, NotJSON
from runs.operations.commands import (
    EXIT_REFUSED,
    OperatorCommand,
    add_where,
    bounded_int,
    execute_inline,
    parse_json,
    where,
)


class Command(OperatorCommand):
    help = "Start a run of an agent with JSON inputs, on a Celery worker (default) or inline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent", help="a registered agent's name")
        parser.add_argument("--inputs", default="{}", help="the run's inputs as JSON")
        parser.add_argument("--run-id", help="choose the run id (default: a fresh one)")
        parser.add_argument(
            "--idempotency-key", help="a repeat with the same key is the same run, not a new one"
        )
        parser.add_argument(
            "--max-resumes", type=bounded_int(0, 1_000_000), help="the run's resume budget"
        )
        parser.add_argument(
            "--concurrency-key", help="at most --concurrency-limit runs of this key at once"
        )
        parser.add_argument(
            "--concurrency-limit", type=bounded_int(1, 10_000), help="runs of the key at once"
        )
        parser.add_argument("--priority", type=bounded_int(0, 9), help="0 (default) to 9 (first)")
        parser.add_argument(
            "--start-at", type=_time, help="not executed before this ISO 8601 time, with its zone"
        )
        parser.add_argument(
            "--deadline", type=_deadline, help="seconds from the start, or an ISO 8601 time"
        )
        parser.add_argument(
            "--team",
            help="the team the run belongs to (default: the agent's declared team, else "
            "RUNLEDGER_DEFAULT_TEAM)",
        )
        add_where(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        inputs = parse_json(options["inputs"], what="--inputs")
        try:
            with where(options):  # announced to the workers after the commit, unless --inline
                handle = api.start_run(
                    options["agent"],
                    inputs,
                    run_id=options["run_id"],
                    idempotency_key=options["idempotency_key"],
                    max_resumes=options["max_resumes"],
                    concurrency_key=options["concurrency_key"],
                    concurrency_limit=options["concurrency_limit"],
                    priority=options["priority"],
                    start_at=options["start_at"],
                    deadline=options["deadline"],
                    team=options["team"],
                    by=transitions.cli_actor(),
                    reason="started from the command line",
                )
        except (api.UnknownAgent, Conflict, NotJSON, ValueError) as exc:  # InvalidInput too
            raise CommandError(str(exc), returncode=EXIT_REFUSED) from exc
        if not handle.created:
            self.stdout.write(
                f"run {handle.run_id}: already started with these inputs ({handle.status()})"
            )
        elif options["inline"]:
            execute_inline(handle.run_id, self.stdout)
        else:
            self.stdout.write(f"run {handle.run_id}: queued for a worker")


def _time(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None


def _deadline(text: str) -> float | datetime:
    try:
        return float(text)
    except ValueError:
        return _time(text)
