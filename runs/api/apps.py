from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The HTTP API under ``/api/v1/`` and its service tokens."""

    name = "runs.api"
    label = "runledger_api"
    verbose_name = "HTTP API"
    default_auto_field = "django.db.models.BigAutoField"
