"""Revoke an HTTP API token by name: `manage.py revoke_api_token shop` (it answers 401 at once)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.api import tokens
from runs.api.models import ApiToken


class Command(BaseCommand):
    help = "Revoke an HTTP API token by name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            token = tokens.token_revoke(name=options["name"])
        except ApiToken.DoesNotExist:
            raise CommandError(f"no token named {options['name']!r}") from None
        self.stdout.write(f"token {token.name!r} revoked at {token.revoked_at:%Y-%m-%d %H:%M:%S}")
