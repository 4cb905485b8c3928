"""``provider_client CLIENT_ID SECRET --redirect URI ... --after-logout URI ...``: the one
client (runledger), made or changed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from oauth2_provider.models import Application


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("client_id")
        parser.add_argument("secret")
        parser.add_argument("--redirect", action="append", default=[])
        parser.add_argument("--after-logout", action="append", default=[])

    def handle(self, *args: Any, **options: Any) -> None:
        Application.objects.filter(client_id=options["client_id"]).delete()
        Application.objects.create(
            name="runledger",
            client_id=options["client_id"],
            client_secret=options["secret"],
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
            redirect_uris=" ".join(options["redirect"]),
            post_logout_redirect_uris=" ".join(options["after_logout"]),
            algorithm=Application.RS256_ALGORITHM,
            skip_authorization=True,
        )
