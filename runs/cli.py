"""The ``runledger`` command: every management command with the project's settings, from any
directory, and Celery's worker and beat.

    runledger start_run refund '{"invoice_id": "inv_1002"}'
    runledger worker --concurrency 8        # celery -A runs worker --concurrency 8
    runledger beat                          # celery -A runs beat (exactly one)
    runledger --help                        # runledger's commands, apart from Django's

``manage.py`` keeps working and is the same thing. The development equipment's commands
(``demo``, ``killtest``, ``soak``, ``bench_*``, ``seed_bulk``, ``example_execute``) run from a
source checkout, where ``harness/`` is: ``runledger demo`` installs the equipment and the example
agents for that one process, as ``make demo`` does. They are not in the wheel.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

CELERY = ("worker", "beat")
EQUIPMENT_ENV = {
    "RUNLEDGER_HARNESS": "1",
    "RUNLEDGER_AGENT_MODULES": "ledger.examples.agents",
    "RUNLEDGER_SILENCED_CHECKS": "runledger.E001,runledger.W001",
}


def equipment_commands() -> set[str]:
    """The commands of the development equipment, if this checkout has it (found on disk, not
    imported: importing ``harness`` would install its fault hook)."""
    checkout = Path(__file__).resolve().parent.parent  # beside runs/ in a source checkout
    if importlib.util.find_spec("harness") is None and (checkout / "harness").is_dir():
        sys.path.append(str(checkout))
    spec = importlib.util.find_spec("harness")
    if spec is None or not spec.submodule_search_locations:
        return set()
    folder = Path(next(iter(spec.submodule_search_locations))) / "management" / "commands"
    return {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "runs.settings")
    name = args[0] if args else "help"
    if name in CELERY:
        from runs.celery import app

        app.start([name, *args[1:]])
        return
    if name in equipment_commands() and os.environ.get("RUNLEDGER_HARNESS") != "1":
        for key, value in EQUIPMENT_ENV.items():
            os.environ.setdefault(key, value)
        os.environ["RUNLEDGER_HARNESS"] = "1"
    if name in ("help", "-h", "--help") and len(args) <= 1:
        print_help()
        return
    from django.core.management import execute_from_command_line

    execute_from_command_line(["runledger", *args])


def print_help() -> None:
    """runledger's own commands first, grouped by app; then Django's and the libraries'."""
    import django
    from django.core.management import get_commands, load_command_class

    django.setup()
    ours: dict[str, list[str]] = {}
    others: list[str] = []
    for command, app in sorted(get_commands().items()):
        if app.startswith(("ledger", "runs")):
            ours.setdefault(app, []).append(command)
        else:
            others.append(command)
    out = ["usage: runledger <command> [options]   (runledger <command> --help for one)", ""]
    out += ["  worker     start a Celery worker (celery -A runs worker …)"]
    out += ["  beat       start Celery beat: the sweep and deliveries (exactly one)", ""]
    for app, commands in ours.items():
        out.append(f"runledger's commands ({app}):")
        for command in commands:
            helptext = " ".join(load_command_class(app, command).help.split())
            first = helptext.split(". ")[0].rstrip(".")
            out.append(f"  {command:<22} {first[:76] + '…' if len(first) > 77 else first}")
        out.append("")
    spare = sorted(equipment_commands() - set(get_commands()))
    if spare:
        out.append("development equipment (from a source checkout): " + ", ".join(spare))
        out.append("")
    out.append("Django's and the libraries' commands: " + ", ".join(others))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
