"""``manage.py bench_adapters``: each framework adapter's per-step overhead against the
framework run without it (harness/bench/adapters.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Per-step overhead of each framework adapter against the bare framework run."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=20)
        parser.add_argument("--json", default="", help="add the figures to this file")

    def handle(self, *args: Any, **options: Any) -> None:
        from harness.bench.adapters import BENCHES

        figures: dict[str, Any] = {}
        for name, bench in BENCHES.items():
            if importlib.util.find_spec(name) is None:
                self.stdout.write(f"{name}: not installed, skipped")
                continue
            figures.update(bench(options["rounds"]))
        if options["json"]:
            from harness.bench.results import merge_json

            merge_json(Path(options["json"]), "framework_adapters", figures)
