"""What the operator commands share: exit codes, refusals without tracebacks (bad arguments,
refused actions, a closed pipe), JSON parsing with clear errors, and the inline worker.

Exit codes: 0 the act was done and the run ended as asked; 1 refused or failed (nothing was
written: the reason is printed); 2 bad arguments (argparse); 3 done, but the run executed inline
did not end as asked (it stopped again, or failed); 141 the reader of the output went away.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from ledger import signals, transitions
from ledger.errors import InvalidInput, OperationError
from ledger.inputs import parse_json_text, queryable
from ledger.models import Run, RunStatus, Settlement
from ledger.processes import execute

EXIT_REFUSED = 1
EXIT_NOT_AS_ASKED = 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a process killed by the signal would end

T = TypeVar("T")


class OperatorCommand(BaseCommand):
    """A command whose output may go to a pipe that closes early (``| head``): it stops
    quietly with 141 instead of printing a BrokenPipeError traceback."""

    def run_from_argv(self, argv: list[str]) -> None:
        try:
            super().run_from_argv(argv)
            sys.stdout.flush()
        except BrokenPipeError:
            # Nothing more can be written; silence the interpreter's flush at exit too.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(EXIT_BROKEN_PIPE)


@contextmanager
def refusals(run_id: str = "") -> Iterator[None]:
    """Turn the ledger's refusals into one-line command errors (exit 1), never tracebacks."""
    try:
        yield
    except Run.DoesNotExist:
        raise CommandError(f"no run {run_id}", returncode=EXIT_REFUSED) from None
    except Settlement.DoesNotExist:
        raise CommandError("no such settlement", returncode=EXIT_REFUSED) from None
    except (OperationError, LookupError) as exc:
        text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise CommandError(text, returncode=EXIT_REFUSED) from None


def act(run_id: str, fn: Callable[[], T]) -> T:
    with refusals(run_id):
        return fn()


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high`` (a clear usage error otherwise;
    never an ``int()`` of a 5,000-digit string)."""

    def parse(text: str) -> int:
        body = text.strip().removeprefix("-")
        if not body.isascii() or not body.isdigit() or len(body) > 30:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number")
        value = int(text.strip())
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def add_reason(parser: CommandParser, default: str | None) -> None:
    if default is None:
        parser.add_argument("--reason", required=True, help="why, for the audit")
    else:
        parser.add_argument(
            "--reason", default=default, help="why, for the audit (default: %(default)s)"
        )


def add_where(parser: CommandParser) -> None:
    how = parser.add_mutually_exclusive_group()
    how.add_argument(
        "--enqueue", action="store_true", help="send it to a Celery worker (the default)"
    )
    how.add_argument(
        "--inline",
        action="store_true",
        help="execute it in this process; exit 3 unless the run ends succeeded",
    )


def parse_json(text: str, *, what: str) -> Any:
    """JSON from a command-line argument, or ``CommandError`` saying what is wrong with it
    (syntax, NaN, too deep, too long a number, a NUL byte: ``ledger.inputs``)."""
    try:
        return parse_json_text(text, what=what)
    except InvalidInput as exc:
        raise CommandError(f"{exc}: {text[:80]!r}") from None


def text_arg(text: str) -> str:
    """An argparse type: text the database can take (no NUL byte, no lone surrogate)."""
    if not queryable(text):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} contains a NUL byte or bad Unicode")
    return text


def execute_inline(run_id: str, out: OutputWrapper) -> None:
    """Execute the run in this process, as a worker would (lease, heartbeat, fencing); exit 3
    when it does not end succeeded."""
    name = f"inline:{socket.gethostname()}/pid:{os.getpid()}"
    outcome = execute.run_execute(run_id=run_id, worker=name)
    if outcome is None:
        raise CommandError(
            f"run {run_id} is not claimable: it is finished or another worker holds its lease",
            returncode=EXIT_REFUSED,
        )
    out.write(
        f"run {run_id}: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else "")
    )
    if outcome.detail:
        out.write(f"  {outcome.detail}")
    if outcome.result is not None:
        out.write("  result: " + json.dumps(outcome.result, sort_keys=True))
    if outcome.status != RunStatus.SUCCEEDED:
        raise CommandError(
            f"run {run_id} ended {outcome.status}, not succeeded", returncode=EXIT_NOT_AS_ASKED
        )


def where(options: dict[str, Any]) -> contextlib.AbstractContextManager[None]:
    """Around the transition that queues a run: with ``--inline`` the run is not announced to
    the workers (``ledger.signals.held``), since this process executes it."""
    return signals.held() if options["inline"] else contextlib.nullcontext()


class RequeueCommand(OperatorCommand):
    """``resume_run``/``retry_run``: check with the dry replay, queue (audited as
    ``cli:<login>``), then send to a worker or execute inline."""

    #: The audit's reason when ``--reason`` is not given (or is empty).
    default_reason: str
    transition: Callable[..., Any]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=text_arg)
        parser.add_argument(
            "--max-resumes",
            type=bounded_int(0, 1_000_000),
            help="raise the run's resume budget to this many",
        )
        parser.add_argument(
            "--anyway",
            action="store_true",
            help="resume even when the dry replay says the run would stop again at once",
        )
        add_where(parser)
        add_reason(parser, self.default_reason)

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        with where(options), refusals(run_id):
            try:
                type(self).transition(
                    run_id=run_id,
                    by=transitions.cli_actor(),
                    reason=options["reason"] or self.default_reason,
                    seen_version=None,
                    max_resumes=options["max_resumes"],
                    anyway=options["anyway"],
                )
            except transitions.WouldStopAgain as exc:
                raise CommandError(
                    f"not resumed: {exc.why} (add --anyway to spend a resume regardless)",
                    returncode=EXIT_REFUSED,
                ) from None
        if options["inline"]:
            execute_inline(run_id, self.stdout)
        else:
            self.stdout.write(f"run {run_id}: queued to resume")


class NewRunCommand(OperatorCommand):
    """``clean_run``/``fork_run``: a new run made from a stopped one (audited on both as
    ``cli:<login>``), then sent to a worker or executed inline."""

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=text_arg)
        add_reason(parser, None)
        add_where(parser)
        parser.add_argument(
            "--send-again",
            type=bounded_int(0, 1_000_000),
            metavar="N",
            help="confirm that the new run sends N of the old run's effects again under new "
            "keys (refused, listing them, when the number is not exactly theirs)",
        )

    def start_new(self, options: dict[str, Any], make: Callable[..., Run], **kwargs: Any) -> Run:
        """``make(run_id=…, by=…, reason=…, **kwargs)``; the new run, once it was queued (or
        executed inline)."""
        run_id = options["run_id"]
        with where(options):
            new = act(
                run_id,
                lambda: make(
                    run_id=run_id,
                    by=transitions.cli_actor(),
                    reason=options["reason"],
                    confirm_resend=options["send_again"],
                    **kwargs,
                ),
            )
        self.stdout.write(self.describe(new, options))
        if options["inline"]:
            execute_inline(new.run_id, self.stdout)
        return new

    def describe(self, new: Run, options: dict[str, Any]) -> str:
        raise NotImplementedError
