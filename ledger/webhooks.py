"""Completion events as Standard Webhooks (https://www.standardwebhooks.com): the event types,
secrets, signing, and ``verify_webhook`` for the application that receives them.

Importing this module needs no Django settings and no app registry: an application's web
backend imports ``verify_webhook`` (the client package re-exports it) without being a runledger
project. The signature is the spec's ``v1``: base64 HMAC-SHA256, keyed by the secret's bytes,
over ``"{webhook-id}.{webhook-timestamp}.{body}"`` — computed by the ``standardwebhooks``
package, so any Standard Webhooks library (Svix's, the spec's own in other languages) verifies
what runledger sends.

Each delivery carries three headers:

- ``webhook-id``: the message's id (``msg_…``), the same on every retry of one event to one
  subscription — deduplicate on it;
- ``webhook-timestamp``: when this attempt was signed (Unix seconds), for replay protection;
- ``webhook-signature``: ``v1,<base64>`` (a space-separated list, so a secret can rotate).
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = [
    "EVENT_TYPES",
    "SECRET_PREFIX",
    "TOLERANCE_SECONDS",
    "WebhookVerificationError",
    "new_secret",
    "sign",
    "signed_headers",
    "verify_webhook",
]

#: What an application can subscribe to; each names the status the run entered.
EVENT_TYPES = ("run.succeeded", "run.failed", "run.cancelled", "run.needs_attention")
SECRET_PREFIX = "whsec_"
#: How far a message's timestamp may be from the receiver's clock (the spec's five minutes).
TOLERANCE_SECONDS = 300.0


def new_secret() -> str:
    """A new signing secret: ``whsec_`` and 32 random bytes in base64 (the spec's form)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(*, secret: str, msg_id: str, timestamp: datetime, body: str) -> str:
    """The ``webhook-signature`` header's value for ``body`` (``v1,<base64>``)."""
    return Webhook(secret).sign(msg_id=msg_id, timestamp=timestamp, data=body)


def signed_headers(*, secret: str, msg_id: str, at: datetime, body: str) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt to send ``body``."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": sign(secret=secret, msg_id=msg_id, timestamp=at, body=body),
    }


def verify_webhook(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    tolerance: float = TOLERANCE_SECONDS,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The event, once its signature and timestamp check out; ``WebhookVerificationError``
    (saying what is wrong) otherwise.

    ``payload`` is the request body exactly as received (the bytes, not a re-serialized
    parse); ``headers`` any mapping of the request's headers (names in any case: a Django
    ``request.headers``, a Flask ``request.headers``, a plain dict); ``secret`` the
    subscription's ``whsec_…``. The timestamp must be within ``tolerance`` seconds of ``now``
    (the current time unless given). Verifying says the message is runledger's and fresh; it
    does not say it is new: keep the ``webhook-id`` of each event you acted on and skip a repeat.
    """
    body = payload.decode() if isinstance(payload, bytes) else payload
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    msg_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signatures = lowered.get("webhook-signature", "")
    if not (msg_id and stamp and signatures):
        missing = [h for h in ("webhook-id", "webhook-timestamp", "webhook-signature")
                   if not lowered.get(h)]  # fmt: skip
        raise WebhookVerificationError("missing header(s): " + ", ".join(missing))
    try:
        at = datetime.fromtimestamp(int(stamp), tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise WebhookVerificationError(f"webhook-timestamp {stamp!r} is not Unix seconds") from None
    current = now or datetime.now(tz=UTC)
    if abs(current - at) > timedelta(seconds=tolerance):
        raise WebhookVerificationError(
            f"webhook-timestamp {stamp} is more than {tolerance:g} s from now: a replay, or a "
            "clock that is wrong"
        )
    try:
        expected = sign(secret=secret, msg_id=msg_id, timestamp=at, body=body).split(",", 1)[1]
    except Exception as exc:  # a secret that is not base64
        raise WebhookVerificationError(f"the secret is not a webhook secret: {exc}") from None
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            return dict(json.loads(body))
    raise WebhookVerificationError("no signature matches: a different secret, or a changed body")
