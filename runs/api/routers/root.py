"""``/api/v1/`` itself: which runledger answers (its version) and where its description is."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema

import ledger
from runs.api.auth import require
from runs.api.routers.runs import REFUSALS

router = Router(tags=["service"])


class ServiceOut(Schema):
    name: str
    version: str
    api: str
    openapi: str


@router.get(
    "/",
    response={200: ServiceOut, **REFUSALS},
    summary="This runledger: its version",
    description="runledger's version (as `runledger --version` and the dashboard's footer say "
    "it) and the API's: a client can check what it talks to. Any token may read it.",
)
def root(request: HttpRequest) -> ServiceOut:
    require(request, "read")
    return ServiceOut(
        name="runledger",
        version=ledger.__version__,
        api="1",
        openapi="/api/v1/openapi.json",
    )
