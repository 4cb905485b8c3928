"""``/api/v1/``: the API object (django-ninja), its auth, throttle and problem handlers, and the
routers. The OpenAPI document is served at ``/api/v1/openapi.json`` and kept at
``docs/openapi.json`` (a test keeps the two equal; ``manage.py export_openapi`` writes it)."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.parser import Parser

from runs.api import problems
from runs.api.auth import TokenAuth, TokenThrottle
from runs.api.routers import (
    agents,
    alerts,
    approvals,
    handover,
    pauses,
    root,
    runs,
    schedules,
    settlements,
    webhooks,
)


class StrictJSON(Parser):
    """JSON as RFC 8259 has it: no NaN or Infinity (Python's parser takes them)."""

    def parse_body(self, request: HttpRequest) -> Any:
        """The body, or ``Unstorable`` when a string of it (a value or a key, at any depth)
        holds text PostgreSQL cannot store — refused here, once for every field."""
        data = json.loads(request.body, parse_constant=_no_constant)
        problems.unstorable_json(data)
        return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


class Api(NinjaAPI):
    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        """The document, saying that every refusal is ``application/problem+json``."""
        schema = super().get_openapi_schema(*args, **kwargs)
        for operations in schema["paths"].values():
            for operation in operations.values():
                for status, answer in operation.get("responses", {}).items():
                    content = answer.get("content", {})
                    if int(status) >= 400 and "application/json" in content:
                        answer["content"] = {problems.MEDIA_TYPE: content["application/json"]}
        return schema


api = Api(
    title="runledger",
    version="1",
    description="Start runs, follow them, read their outcome, and act on them as the dashboard "
    "does. Authenticate with `Authorization: Bearer <token>` (`manage.py create_api_token`). "
    "Every refusal is an RFC 9457 problem document.",
    urls_namespace="api-v1",
    auth=TokenAuth(),
    throttle=[TokenThrottle()],
    docs_url=None,  # the reference is in the docs site; no CDN assets on offline machines
    openapi_url="/openapi.json",
    parser=StrictJSON(),
)
problems.install(api)
api.add_router("", root.router)
api.add_router("", runs.router)
api.add_router("", agents.router)
api.add_router("", settlements.router)
api.add_router("", approvals.router)
api.add_router("", pauses.router)
api.add_router("", webhooks.router)
api.add_router("", handover.router)
api.add_router("", alerts.router)
api.add_router("", schedules.router)
