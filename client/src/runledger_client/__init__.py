"""runledger's Python client (the ``runledger-client`` distribution): ``Client`` and
``AsyncClient`` for the HTTP API (``/api/v1/``), the typed answers and errors, and
``verify_webhook`` for completion events. httpx and standardwebhooks; no Django.

``from ledger.client import Client`` (the server's distribution, ``runledger[client]``) gives
the same objects.
"""

from __future__ import annotations

from importlib import metadata

from runledger_client._async import AsyncClient
from runledger_client._client import (
    Agent,
    ApiError,
    AttemptFailure,
    Busy,
    Client,
    Conflict,
    Execution,
    Forbidden,
    Gate,
    InvalidRequest,
    NotFound,
    Pause,
    RateLimited,
    Run,
    RunCancelled,
    RunFailed,
    RunNeedsAttention,
    RunSummary,
    Schedule,
    SentEvent,
    Step,
    StreamEvent,
    TextDelta,
    Unauthorized,
    UnexpectedAnswer,
    Webhook,
    WebhookVerificationError,
    verify_webhook,
)

__all__ = [
    "Agent",
    "ApiError",
    "AsyncClient",
    "AttemptFailure",
    "Busy",
    "Client",
    "Conflict",
    "Execution",
    "Forbidden",
    "Gate",
    "InvalidRequest",
    "NotFound",
    "Pause",
    "RateLimited",
    "Run",
    "RunCancelled",
    "RunFailed",
    "RunNeedsAttention",
    "RunSummary",
    "Schedule",
    "SentEvent",
    "Step",
    "StreamEvent",
    "TextDelta",
    "Unauthorized",
    "UnexpectedAnswer",
    "Webhook",
    "WebhookVerificationError",
    "verify_webhook",
]


def _version() -> str:
    try:
        return metadata.version("runledger-client")
    except metadata.PackageNotFoundError:  # a checkout on sys.path, never installed
        return "0+unknown"


__version__ = _version()
