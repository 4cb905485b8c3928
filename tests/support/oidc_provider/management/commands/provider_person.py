"""``provider_person NAME PASSWORD --groups a,b``: a person at the provider, in exactly those
groups (made or changed)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("password")
        parser.add_argument("--groups", default="")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        user, _ = User.objects.get_or_create(username=options["username"])
        user.set_password(options["password"])
        user.email = options["email"] or f"{options['username']}@example.com"
        user.save()
        names = [g.strip() for g in options["groups"].split(",") if g.strip()]
        user.groups.set([Group.objects.get_or_create(name=n)[0] for n in names])
        self.stdout.write(str(user.pk))
