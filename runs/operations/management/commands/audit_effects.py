"""The ledger's effects against the downstream systems: `manage.py audit_effects`."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from ledger.models import EffectAudit
from ledger.processes.effect_audit import audit_effects
from ledger.transitions import cli_actor

_AGE = re.compile(r"^(\d+)([smhdw])$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_age(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``90s``, ``2w``."""
    match = _AGE.match(text.strip())
    if not match:
        raise CommandError(f"--since {text!r}: give a number and a unit, e.g. 7d, 12h, 30m")
    return timedelta(**{_UNIT[match[2]]: int(match[1])})


class Command(BaseCommand):
    help = (
        "Ask each effect tool's reconcile about every effect key in the ledger and list the "
        "differences (done here but not there, not done here but there, different results, "
        "keys the ledger does not know). Read-only; the report is kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--agent", help="only effects of this agent's runs")
        parser.add_argument("--since", help="only effects written in this window: 7d, 12h, 30m")
        parser.add_argument("--limit", type=int, default=1000, help="most rows in this pass")
        parser.add_argument(
            "--rate", type=float, default=10.0, help="most downstream questions a second (0: any)"
        )
        parser.add_argument("--resume", type=int, metavar="AUDIT", help="continue this audit")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["limit"] < 1 or options["rate"] < 0:
            raise CommandError("--limit must be at least 1 and --rate 0 or more")
        resume = options["resume"]
        if resume is not None and not EffectAudit.objects.filter(pk=resume).exists():
            raise CommandError(f"no effect audit {resume}")
        since = timezone.now() - parse_age(options["since"]) if options["since"] else None
        audit = audit_effects(
            agent=options["agent"],
            since=since,
            limit=options["limit"],
            rate=options["rate"],
            resume=resume,
            by=cli_actor(),
        )
        for finding in audit.findings.order_by("id"):
            self.stdout.write(
                f"{finding.difference:<22} {finding.effect_key}  run {finding.run_id or '-'} "
                f"step {finding.step_id or '-'} "
                f"({finding.tool}, ledger {finding.ledger_status or '-'})"
            )
        state = (
            "finished" if audit.finished else f"stopped at row {audit.cursor}: --resume {audit.pk}"
        )
        self.stdout.write(
            f"audit_effects: audit {audit.pk}: {audit.checked} asked, "
            f"{audit.findings.count()} difference(s), {audit.unanswered} unanswered, "
            f"{audit.skipped} without a read path, {audit.listed} listed downstream; {state}"
        )
