"""Applications' subscriptions to completion events: `manage.py webhooks add|list|remove`.

``add URL --agent NAME | --run RUN_ID [--events run.succeeded,run.failed]`` prints the new
subscription and its signing secret (``whsec_…``) once: the application keeps it to verify what
it receives. ``list`` shows the live subscriptions (``--all``: removed ones too), never a secret;
``remove ID`` stops new events to it. Changes are audited as ``cli:<login>``. Exit 0 done, 1
refused (nothing written: the reason is printed), 2 bad arguments.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from ledger import events, transitions
from ledger.models import WebhookSubscription
from ledger.transitions.events import subscription_snapshot
from runs.operations.commands import OperatorCommand, bounded_int, refusals, text_arg


class Command(OperatorCommand):
    help = "Subscribe a URL to completion events of runs (add), list subscriptions, remove one."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="add|list|remove")
        add = sub.add_parser("add", help="subscribe a URL; prints its signing secret once")
        add.add_argument("url", type=text_arg, help="where events are POSTed (http or https)")
        scope = add.add_mutually_exclusive_group(required=True)
        scope.add_argument("--agent", type=text_arg, help="every run of this agent")
        scope.add_argument("--run", dest="run_id", type=text_arg, help="this one run")
        add.add_argument(
            "--events",
            default=",".join(events.EVENT_TYPES),
            help="comma-separated, of " + ", ".join(events.EVENT_TYPES) + " (default: all)",
        )
        add.add_argument("--description", default="", help="what the subscription is for")
        add.add_argument(
            "--team",
            default="",
            type=text_arg,
            help="with --agent: only this team's runs of it (default: every team's)",
        )
        listing = sub.add_parser("list", help="the subscriptions (never their secrets)")
        listing.add_argument("--all", action="store_true", help="removed ones too")
        listing.add_argument("--json", action="store_true", help="one JSON object per line")
        remove = sub.add_parser("remove", help="stop sending events to a subscription")
        remove.add_argument("id", type=bounded_int(1, 2**63 - 1))

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "add":
            self._add(options)
        elif action == "list":
            self._list(all_=options["all"], as_json=options["json"])
        else:
            with refusals():
                removed = events.unsubscribe(options["id"], by=transitions.cli_actor())
            self.stdout.write(f"subscription {removed.pk} removed: {describe(removed)}")

    def _add(self, options: dict[str, Any]) -> None:
        with refusals(options.get("run_id") or ""):
            subscription, secret = events.subscribe(
                options["url"],
                agent=options["agent"],
                run_id=options["run_id"],
                events=options["events"],
                description=options["description"],
                by=transitions.cli_actor(),
                team=options["team"],
            )
        self.stdout.write(f"subscription {subscription.pk}: {describe(subscription)}")
        self.stdout.write(f"signing secret (shown once, keep it): {secret}")

    def _list(self, *, all_: bool, as_json: bool) -> None:
        rows = events.subscriptions(removed=all_)
        for s in rows:
            if as_json:
                self.stdout.write(json.dumps(subscription_snapshot(s)))
            else:
                gone = f"  (removed {s.removed_at:%Y-%m-%d %H:%M})" if s.removed_at else ""
                self.stdout.write(f"{s.pk}  {describe(s)}{gone}")
        if not as_json:
            self.stdout.write(f"{len(rows)} subscription(s)")


def describe(s: WebhookSubscription) -> str:
    team = f" in team {s.team}" if s.team else ""
    return f"{s.scope}{team} → {s.url} ({', '.join(s.events)})"
