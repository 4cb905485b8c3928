"""``manage.py createroleuser alice --role operator [--password ...]``."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from runs.dashboard.models import ROLES
from runs.dashboard.roles import user_set_role
from runs.operations.commands import text_arg


class Command(BaseCommand):
    help = (
        "Create a dashboard user in a role (viewer, operator, approver, admin), or move an "
        "existing user to that role. Without --password a new user gets a random one, printed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", type=text_arg)
        parser.add_argument("--role", required=True, choices=ROLES)
        parser.add_argument("--password", default=None)
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"].strip()
        if not username:
            raise CommandError("a username cannot be empty")
        password: str | None = options["password"]
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
            user_set_role(user=user, role=options["role"])
        verb = "created" if created else "updated"
        self.stdout.write(f"{verb} user {username!r} with role {options['role']}")
        if generated:
            self.stdout.write(f"password: {password}")


def _validate(password: str, *, username: str, email: str) -> None:
    """Django's password validators (AUTH_PASSWORD_VALIDATORS), as the admin applies them."""
    user = User.objects.filter(username=username).first() or User(username=username, email=email)
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        raise CommandError("password refused: " + " ".join(exc.messages)) from exc
