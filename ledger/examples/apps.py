from __future__ import annotations

from django.apps import AppConfig


class ExamplesConfig(AppConfig):
    name = "ledger.examples"
    label = "examples"
    verbose_name = "Example downstream systems"
    default_auto_field = "django.db.models.BigAutoField"
