"""Print the HTTP API's OpenAPI document: `manage.py export_openapi > docs/openapi.json`."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Print the OpenAPI document of /api/v1/ (as served at /api/v1/openapi.json)."

    def handle(self, *args: Any, **options: Any) -> None:
        from runs.api.urls import api

        schema = api.get_openapi_schema(path_prefix="/api/v1/")
        self.stdout.write(json.dumps(schema, indent=2, sort_keys=True))
