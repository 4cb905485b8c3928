"""Send an event to a run: `runledger send_event <run_id> <name> --payload '{…}' --event-id …`.

Through ``ledger.api.send_event``: the event lands in the run's mailbox, where the agent's
``ctx.wait_for_event(name)`` takes it exactly once; a run released while it waits for that name
is queued at once. Idempotent by ``--event-id`` (the same id with the same name and payload is
the same event; with another, refused). Sent as ``cli:<login>``. Exit codes: see ``_common``.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger import api, transitions
from runs.operations.commands import EXIT_REFUSED, OperatorCommand, parse_json


class Command(OperatorCommand):
    help = "Send an event (a name and a JSON payload) to a run's mailbox."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the run to send the event to")
        parser.add_argument("name", help="the name the agent waits for (ctx.wait_for_event)")
        parser.add_argument("--payload", default="null", help="the event's payload as JSON")
        parser.add_argument(
            "--event-id", help="a repeat with the same id is the same event, not a new one"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        payload = parse_json(options["payload"], what="--payload")
        try:
            sent = api.send_event(
                options["run_id"],
                options["name"],
                payload,
                event_id=options["event_id"],
                by=transitions.cli_actor(),
            )
        except transitions.OperationError as exc:
            raise CommandError(str(exc), returncode=EXIT_REFUSED) from exc
        what = "sent" if sent.created else "already sent (the same event)"
        self.stdout.write(f"run {sent.run_id}: event {sent.name!r} {what}, id {sent.event_id}")
