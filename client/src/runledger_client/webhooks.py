"""``verify_webhook``: checking a completion event's Standard Webhooks signature in the
application that receives it (https://www.standardwebhooks.com).

The same check as the server's ``ledger.webhooks.verify_webhook``, kept here so that an
application needs neither Django nor the server; a test signs with the server's code and verifies
with this one. The signature is the spec's ``v1``: base64 HMAC-SHA256, keyed by the secret's
bytes, over ``"{webhook-id}.{webhook-timestamp}.{body}"``, computed by ``standardwebhooks``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["TOLERANCE_SECONDS", "WebhookVerificationError", "verify_webhook"]

#: How far a message's timestamp may be from the receiver's clock (the spec's five minutes).
TOLERANCE_SECONDS = 300.0
HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


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
    missing = [h for h in HEADERS if not lowered.get(h)]
    if missing:
        raise WebhookVerificationError("missing header(s): " + ", ".join(missing))
    msg_id, stamp, signatures = (lowered[h] for h in HEADERS)
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
        signed = Webhook(secret).sign(msg_id=msg_id, timestamp=at, data=body)
    except Exception as exc:  # a secret that is not base64
        raise WebhookVerificationError(f"the secret is not a webhook secret: {exc}") from None
    expected = signed.split(",", 1)[1]
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            return dict(json.loads(body))
    raise WebhookVerificationError("no signature matches: a different secret, or a changed body")
