"""Make a service token for the HTTP API: `manage.py create_api_token --name shop --role operator`.

The token is printed once and stored only as a digest. ``--user`` makes a person's token (it
acts as that person; an approver token must be one). ``--team payments`` binds it to a team: it
sees and acts on that team's runs only (a person's token only in a team where the person holds
a role); without it the token reaches every team its role — or its person — reaches.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.api import tokens
from runs.api.models import ROLES


class Command(BaseCommand):
    help = "Create an HTTP API token (printed once) with a role: viewer, operator or approver."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="shown in the audit as api:<name>")
        parser.add_argument("--role", required=True, choices=ROLES)
        parser.add_argument("--user", help="a person's token: the user it acts as")
        parser.add_argument(
            "--team",
            default="",
            help="bind the token to this team: it sees and acts on that team's runs only",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = None
        if options["user"]:
            user = User.objects.filter(username=options["user"], is_active=True).first()
            if user is None:
                raise CommandError(f"no active user {options['user']!r}")
        try:
            made = tokens.token_create(
                name=options["name"], role=options["role"], user=user, team=options["team"]
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(made.secret)
        team = f", team {made.token.team}" if made.token.team else ", every team"
        self.stderr.write(
            f"token {made.token.name!r} ({made.token.role}{team}) created; it is shown only once"
        )
