"""Execute one run in this process, as a worker would (used to stage real crashes)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harness.unannounced import start_unannounced
from ledger.processes import execute


class Command(BaseCommand):
    help = "Execute (or resume) one run inline. With RUNLEDGER_KILL_AT set, the process dies there."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", nargs="?", help="the run to execute")
        parser.add_argument("--new", metavar="AGENT", help="start a run of AGENT first")
        parser.add_argument("--inputs", default="{}", help="JSON inputs of the new run")
        parser.add_argument("--max-resumes", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = options["run_id"]
        if options["new"]:
            try:
                inputs = json.loads(options["inputs"])
            except json.JSONDecodeError as exc:
                raise CommandError(f"--inputs is not JSON: {exc}") from exc
            run_id = start_unannounced(
                agent=options["new"], inputs=inputs, max_resumes=options["max_resumes"]
            ).run_id
            # Written before executing: the caller learns the id even if this process dies.
            sys.stdout.write(f"run_id={run_id}\n")
            sys.stdout.flush()
        if not run_id:
            raise CommandError("give a run id or --new AGENT")
        outcome = execute.run_execute(run_id=run_id, worker=f"inline-{os.getpid()}")
        if outcome is not None and outcome.continued_as:
            self.stdout.write(f"continued_as={outcome.continued_as}")
        self.stdout.write(str(outcome.status if outcome else "not claimable"))
