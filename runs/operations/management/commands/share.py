"""``runledger share``: the files runledger ships for the platform around it (the CHANGELOG, the
alert rules, the Grafana board), from the installed package."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs import share


class Command(BaseCommand):
    help = (
        "Print a file runledger ships for the platform (changelog, alerts, grafana) to standard "
        "output, or with --path where it is; without a name, list them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", nargs="?", choices=sorted(share.SHARED), help="which file")
        parser.add_argument("--path", action="store_true", help="print where it is instead")

    def handle(self, *args: Any, name: str | None = None, **options: Any) -> None:
        if name is None:
            for each, (_, _, what) in share.SHARED.items():
                self.stdout.write(f"{each:<10} {_where(each)}  ({what})")
            return
        try:
            found = share.path(name)
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from None
        if options["path"]:
            self.stdout.write(str(found))
        else:
            self.stdout.write(found.read_text(), ending="")


def _where(name: str) -> str:
    try:
        return str(share.path(name))
    except FileNotFoundError:
        return "missing"
