"""The harness as a Django app: its commands (``manage.py killtest``, ``soak``, ``demo``,
``bench_*``, ``seed_bulk``, ``example_execute``), and its fault registry installed as the
product's one fault hook (``ledger.faultpoints``)."""

from __future__ import annotations

from django.apps import AppConfig


class HarnessConfig(AppConfig):
    name = "harness"
    verbose_name = "Development equipment"

    def ready(self) -> None:
        import harness.faults  # noqa: F401 - installs itself as the product's fault hook
