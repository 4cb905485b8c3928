"""List runs, newest first: `manage.py list_runs --status needs_attention --search cus_hopper`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger import selectors
from ledger.models import Run, RunStatus
from runs.operations.commands import OperatorCommand, bounded_int, text_arg


class Command(OperatorCommand):
    help = "List runs by status (newest first), with reason, agent, resumes used and title."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--status", action="append", help="repeat for several statuses")
        parser.add_argument("--agent", type=text_arg)
        parser.add_argument("--team", type=text_arg, help="only this team's runs")
        parser.add_argument(
            "--search",
            default="",
            help="a title's words, a label as key:value, or a run id prefix (as the dashboard)",
        )
        parser.add_argument("--limit", type=bounded_int(1, 10_000), default=50)

    def handle(self, *args: Any, **options: Any) -> None:
        runs = Run.objects.order_by("-created_at", "-run_id")
        statuses = options["status"] or []
        unknown = set(statuses) - set(RunStatus.values)
        if unknown:
            raise CommandError(
                f"unknown status {', '.join(sorted(unknown))}; one of {', '.join(RunStatus.values)}"
            )
        if statuses:
            runs = runs.filter(status__in=statuses)
        if options["agent"]:
            runs = runs.filter(agent=options["agent"])
        if options["team"]:
            runs = runs.filter(team=options["team"])
        if options["search"].strip():
            runs = runs.filter(selectors.search_condition(options["search"]))
        rows = list(
            runs.values_list(
                "run_id",
                "agent",
                "team",
                "status",
                "reason",
                "resume_count",
                "max_resumes",
                "created_at",
                "title",
            )[: options["limit"]]
        )
        self.stdout.write(
            f"{'run':<26} {'agent':<14} {'team':<12} {'status':<16} {'reason':<15} resumes  "
            f"{'created':<19}  title"
        )
        for run_id, agent, team, status, reason, used, budget, created, title in rows:
            self.stdout.write(
                f"{run_id:<26} {agent:<14} {team:<12} {status:<16} {reason or '-':<15} "
                f"{used:>3}/{budget:<3}  {created:%Y-%m-%d %H:%M:%S}  {title}"
            )
        self.stdout.write(f"{len(rows)} run(s)")
