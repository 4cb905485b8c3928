"""Signed approval links: a gate's notification carries one per approver; each opens that gate
for that person (signed in), once, until RUNLEDGER_APPROVAL_LINK_SECONDS have passed. Built on
Django's signing (the project's SECRET_KEY); the nonce of a used link is kept on the gate."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.core import signing

from ledger.conf import conf
from ledger.errors import NotAllowed
from ledger.models import Gate

LINK_SALT = "runledger.gate-link"


@dataclass(frozen=True)
class GateLink:
    """A checked link: the gate it opens, for whom, and its nonce (used once)."""

    gate: Gate
    username: str
    nonce: str


def gate_link_token(*, gate: Gate, username: str) -> str:
    """A signed token for ``username`` to open ``gate`` (the notification's link): it expires
    after RUNLEDGER_APPROVAL_LINK_SECONDS and works once; it still needs that person signed in."""
    nonce = secrets.token_urlsafe(12)
    return signing.dumps({"g": gate.pk, "u": username, "n": nonce}, salt=LINK_SALT, compress=True)


def gate_link_check(*, token: str, username: str) -> GateLink:
    """The gate a link opens for the signed-in ``username``; ``NotAllowed`` when the link is
    forged, expired, for another user, used before, or its gate is gone. Writes nothing."""
    try:
        data = signing.loads(token, salt=LINK_SALT, max_age=conf.RUNLEDGER_APPROVAL_LINK_SECONDS)
    except signing.SignatureExpired as exc:
        raise NotAllowed("this approval link has expired; open the gate in the dashboard") from exc
    except signing.BadSignature as exc:
        raise NotAllowed("this approval link is not valid") from exc
    if not isinstance(data, dict) or data.get("u") != username:
        raise NotAllowed(
            "this approval link was made for another user; sign in as that user or open the "
            "gate in the dashboard"
        )
    gate_id = data.get("g")
    gate = Gate.objects.filter(pk=gate_id).first() if isinstance(gate_id, int) else None
    if gate is None:
        raise NotAllowed("the gate of this approval link no longer exists")
    nonce = str(data.get("n", ""))
    if nonce in gate.links_used:
        raise NotAllowed("this approval link was used already; open the gate in the dashboard")
    return GateLink(gate=gate, username=username, nonce=nonce)
