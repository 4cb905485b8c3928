"""``manage.py createroleuser alice --role operator [--team T] [--prompt | --password-file P]``.

Without ``--team`` the role holds in every team (a role group, or superuser for ``admin``).
With ``--team`` it holds in that team only (a ``TeamRole``, audited as ``team_role``); the
person's roles elsewhere are left as they are.

A password never goes on the command line (where the shell history and ``ps`` keep it): it is
asked for (``--prompt``, twice, not echoed) or read from a file's first line
(``--password-file``, ``-`` for standard input). ``--password`` still works, deprecated.
"""

from __future__ import annotations

import getpass
import secrets
import sys
import warnings
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from ledger.errors import InvalidInput
from ledger.teams import check_team
from ledger.transitions import cli_actor
from runs.dashboard.models import ROLE_PERMISSIONS, ROLES
from runs.dashboard.roles import user_set_role
from runs.dashboard.teams import set_team_role
from runs.operations.commands import text_arg


class Command(BaseCommand):
    help = (
        "Create a dashboard user in a role (viewer, operator, approver, admin), or move an "
        "existing user to that role. Without --prompt or --password-file a new user gets a "
        "random password, printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", type=text_arg)
        parser.add_argument("--role", required=True, choices=ROLES)
        parser.add_argument(
            "--team",
            default=None,
            type=text_arg,
            help="the role in this team only (viewer, operator or approver); without it the "
            "role holds in every team",
        )
        given = parser.add_mutually_exclusive_group()
        given.add_argument(
            "--prompt", action="store_true", help="ask for the password (twice, not echoed)"
        )
        given.add_argument(
            "--password-file",
            default=None,
            help="read the password from this file's first line (`-`: standard input)",
        )
        given.add_argument(
            "--password", default=None, help="deprecated: the shell history keeps it"
        )
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"].strip()
        if not username:
            raise CommandError("a username cannot be empty")
        team = options["team"]
        if team is not None:
            if options["role"] not in ROLE_PERMISSIONS:
                raise CommandError(
                    f"--team takes a role of one team ({', '.join(ROLE_PERMISSIONS)}); an admin "
                    "holds in every team"
                )
            try:
                check_team(team)
            except InvalidInput as exc:
                raise CommandError(str(exc)) from None
        password = self._password(options)
        if password is not None:
            _validate(password, username=username, email=options["email"])
        with transaction.atomic():
            user, created = User.objects.get_or_create(
                username=username, defaults={"email": options["email"]}
            )
            generated = created and password is None
            if generated:
                password = secrets.token_urlsafe(12)
            if password is not None:
                user.set_password(password)
                user.save(update_fields=["password"])
            if team is None:
                user_set_role(user=user, role=options["role"])
            else:
                set_team_role(
                    user=user,
                    team=team,
                    role=options["role"],
                    by=cli_actor(),
                    reason="manage.py createroleuser --team",
                )
        verb = "created" if created else "updated"
        where = f" in team {team}" if team is not None else ""
        self.stdout.write(f"{verb} user {username!r} with role {options['role']}{where}")
        if generated:
            self.stdout.write(f"password: {password}")

    def _password(self, options: dict[str, Any]) -> str | None:
        if options["password"] is not None:
            warnings.warn(
                "createroleuser --password is deprecated: the shell history keeps the password; "
                "use --prompt or --password-file",
                DeprecationWarning,
                stacklevel=2,
            )
            self.stderr.write("warning: --password is deprecated (use --prompt or --password-file)")
            return str(options["password"])
        if options["password_file"] is not None:
            return _read_password_file(options["password_file"])
        if options["prompt"]:
            first = getpass.getpass("Password: ")
            if getpass.getpass("Password (again): ") != first:
                raise CommandError("the two passwords differ; nothing changed")
            if not first:
                raise CommandError("a password cannot be empty; nothing changed")
            return first
        return None


def _read_password_file(name: str) -> str:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read the password file {name}: {exc}") from exc
    password = text.split("\n", 1)[0].rstrip("\r")
    if not password:
        raise CommandError(f"the password file {name} has no password on its first line")
    return password


def _validate(password: str, *, username: str, email: str) -> None:
    """Django's password validators (AUTH_PASSWORD_VALIDATORS), as the admin applies them."""
    user = User.objects.filter(username=username).first() or User(username=username, email=email)
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        raise CommandError("password refused: " + " ".join(exc.messages)) from exc
