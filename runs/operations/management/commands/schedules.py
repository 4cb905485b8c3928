"""Schedules: `runledger schedules add|list|pause|resume|remove`.

``add NAME --agent AGENT (--cron "0 3 * * *" | --every 15m) [--timezone Europe/Paris]
[--inputs JSON] [--missed skip|once|each]`` and a tick's start options (``--priority``,
``--concurrency-key``, ``--concurrency-limit``, ``--deadline`` seconds) adds a schedule; every
input is checked first (the cron expression, the time zone, the interval, the agent, the inputs
as a start checks them) and a refusal writes nothing. ``list`` shows the live schedules with
their next tick and last run (``--all``: removed ones too; ``--json``: one object a line);
``pause``, ``resume`` and ``remove`` take a schedule's name or id. Changes are audited as
``cli:<login>``. Exit 0 done, 1 refused (nothing written: the reason is printed), 2 bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ledger import schedules, selectors, transitions
from ledger.models import Schedule
from ledger.transitions.schedules import schedule_snapshot
from runs.operations.commands import (
    EXIT_REFUSED,
    OperatorCommand,
    bounded_int,
    parse_json,
    refusals,
    text_arg,
)

_EVERY = re.compile(r"(\d{1,12})\s*(s|sec|m|min|h|d)?")
_UNITS = {None: 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def every(text: str) -> int:
    """An argparse type: ``90``, ``90s``, ``15m``, ``2h``, ``1d`` as whole seconds."""
    found = _EVERY.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not an interval (seconds, or a number with s, m, h or d: 15m)"
        )
    return int(found.group(1)) * _UNITS[found.group(2)]


class Command(OperatorCommand):
    help = "Schedules: add one (cron or interval), list them, pause, resume or remove one."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(
            dest="action", required=True, metavar="add|list|pause|resume|remove"
        )
        add = sub.add_parser("add", help="add a schedule: runs of an agent at each tick")
        add.add_argument("name", type=text_arg, help="what commands and pages call it")
        add.add_argument("--agent", required=True, type=text_arg, help="a registered agent")
        when = add.add_mutually_exclusive_group(required=True)
        when.add_argument("--cron", type=text_arg, help="five fields, e.g. '0 3 * * *'")
        when.add_argument("--every", type=every, help="an interval: seconds, or 15m, 2h, 1d")
        add.add_argument(
            "--timezone", default="UTC", type=text_arg, help="the cron's IANA time zone (UTC)"
        )
        add.add_argument("--inputs", default="{}", help="each run's inputs as JSON")
        add.add_argument(
            "--missed",
            default="skip",
            choices=schedules.POLICIES,
            help="ticks missed while no pass ran: skip them, run once, or run each "
            f"(at most {schedules.CATCH_UP_MAX}); default skip",
        )
        add.add_argument("--priority", type=bounded_int(0, 9), help="each run's priority")
        add.add_argument("--concurrency-key", type=text_arg, help="each run's concurrency key")
        add.add_argument("--concurrency-limit", type=bounded_int(1, 10_000))
        add.add_argument(
            "--deadline", type=float, help="each run stops, failed, this many seconds after it"
        )
        add.add_argument("--description", default="", type=text_arg)
        add.add_argument(
            "--team",
            type=text_arg,
            help="the team of the schedule and its runs (default: the agent's, else the default)",
        )
        add.add_argument("--reason", default="", help="why, for the audit")
        listing = sub.add_parser("list", help="the schedules, next tick and last run")
        listing.add_argument("--all", action="store_true", help="removed ones too")
        listing.add_argument("--json", action="store_true", help="one JSON object per line")
        listing.add_argument("--team", type=text_arg, help="only this team's schedules")
        for action, words in (
            ("pause", "its ticks start nothing until resumed"),
            ("resume", "it ticks again from now (ticks while paused start nothing)"),
            ("remove", "it never ticks again (its runs keep naming it)"),
        ):
            one = sub.add_parser(action, help=words)
            one.add_argument("schedule", type=text_arg, help="its name or id (sch_…)")
            one.add_argument("--reason", default="", help="why, for the audit")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "add":
            self._add(options)
        elif action == "list":
            self._list(all_=options["all"], as_json=options["json"], team=options["team"])
        else:
            self._change(action, options)

    def _add(self, options: dict[str, Any]) -> None:
        inputs = parse_json(options["inputs"], what="--inputs")
        with refusals():
            made = transitions.schedule_add(
                name=options["name"],
                agent=options["agent"],
                inputs=inputs,
                cron=options["cron"],
                interval=options["every"],
                timezone_name=options["timezone"],
                missed=options["missed"],
                priority=options["priority"],
                concurrency_key=options["concurrency_key"],
                concurrency_limit=options["concurrency_limit"],
                deadline=options["deadline"],
                description=options["description"],
                by=transitions.cli_actor(),
                reason=options["reason"],
                team=options["team"],
            )
        self.stdout.write(f"schedule {made.name} ({made.schedule_id}) added: {describe(made)}")

    def _list(self, *, all_: bool, as_json: bool, team: str | None = None) -> None:
        listed = selectors.schedules_list(removed=all_)
        rows = list(listed.filter(team=team) if team else listed)
        for s in rows:
            if as_json:
                self.stdout.write(json.dumps(schedule_snapshot(s)))
            else:
                self.stdout.write(f"{s.name}  {s.schedule_id}  team {s.team}  {describe(s)}")
        if not as_json:
            self.stdout.write(f"{len(rows)} schedule(s)")

    def _change(self, action: str, options: dict[str, Any]) -> None:
        found = selectors.schedule_named(options["schedule"])
        if found is None:
            raise CommandError(f"no schedule {options['schedule']!r}", returncode=EXIT_REFUSED)
        change = {
            "pause": transitions.schedule_pause,
            "resume": transitions.schedule_resume,
            "remove": transitions.schedule_remove,
        }[action]
        with refusals():
            done = change(
                schedule_id=found.schedule_id, by=transitions.cli_actor(), reason=options["reason"]
            )
        past = {"pause": "paused", "resume": "resumed", "remove": "removed"}[action]
        self.stdout.write(f"schedule {done.name} ({done.schedule_id}) {past}: {describe(done)}")


def describe(s: Schedule) -> str:
    """One line: the agent, when it ticks, the next tick and the last run."""
    spec = schedules.Spec(cron=s.cron, interval=s.interval_seconds, timezone=s.timezone)
    if s.removed_at is not None:
        state = f"removed {s.removed_at:%Y-%m-%d %H:%M %Z} by {s.removed_by}"
    elif s.paused_at is not None:
        state = f"paused by {s.paused_by}"
    else:
        state = f"next {s.next_at:%Y-%m-%d %H:%M:%S %Z}"
    last = f", last run {s.last_run_id}" if s.last_run_id else ""
    error = f", last error: {s.last_error}" if s.last_error else ""
    return f"{s.agent}, {spec.describe()}, missed: {s.missed}; {state}{last}{error}"
