"""Simulated downstream systems: a payment provider, an outbox, a notifier, an append-only
ledger and a legacy gateway.

Each persists to the database so that effects can be counted from any process, and each
behaves as its real counterpart does towards an idempotency key: the provider deduplicates by
key and also checks the fencing token (``ledger.engine.fence``); the outbox's message id is the
key; the append-only ledger and the notifier do not deduplicate (the ledger can be searched by
the key it was given as memo, the notifier cannot be asked at all); the gateway takes no key.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any

from django.db import IntegrityError, router, transaction
from django.db.models import F

from ledger import faultpoints
from ledger.examples.models import (
    GatewayCharge,
    LedgerEntry,
    Notification,
    OutboxMessage,
    ProviderCharge,
    ProviderFence,
)
from ledger.registry import NOT_HAPPENED


class IdempotencyConflict(Exception):
    """The same key was sent with other parameters (Stripe answers this with an error)."""


class StaleFencingToken(Exception):
    """A request under a key carried a lower fencing token than one already seen for it: it
    comes from a worker whose lease was taken over, and the provider refuses it."""


def _admit(idempotency_key: str, fencing_token: int | None) -> bool:
    """Record ``fencing_token`` for the key; False (and counted) when a higher one was seen.

    A request without a token (a caller that has none) is admitted unchanged.
    """
    if fencing_token is None:
        return True
    with transaction.atomic(using=router.db_for_write(ProviderFence)):
        fence, created = ProviderFence.objects.select_for_update().get_or_create(
            idempotency_key=idempotency_key, defaults={"token": fencing_token}
        )
        if created or fencing_token == fence.token:
            return True
        if fencing_token < fence.token:
            ProviderFence.objects.filter(pk=fence.pk).update(refused=F("refused") + 1)
            return False
        ProviderFence.objects.filter(pk=fence.pk).update(token=fencing_token)
    return True


def _charge_view(charge: ProviderCharge) -> dict[str, Any]:
    return {
        "charge_id": charge.charge_id,
        "customer": charge.customer,
        "amount_cents": charge.amount_cents,
    }


def provider_charge(
    *, customer: str, amount_cents: int, idempotency_key: str, fencing_token: int | None = None
) -> dict[str, Any]:
    """Create a charge, or return the first charge made under this key; refuse a request whose
    fencing token is lower than one already seen for the key (``StaleFencingToken``)."""
    faultpoints.point("charge.before_effect")
    if not _admit(idempotency_key, fencing_token):
        raise StaleFencingToken(
            f"key {idempotency_key}: fencing token {fencing_token} is stale; a newer holder "
            "has used this key"
        )
    charge_id = "ch_" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:20]
    try:
        with transaction.atomic(using=router.db_for_write(ProviderCharge)):
            charge = ProviderCharge.objects.create(
                idempotency_key=idempotency_key,
                charge_id=charge_id,
                customer=customer,
                amount_cents=amount_cents,
            )
    except IntegrityError:
        charge = ProviderCharge.objects.get(idempotency_key=idempotency_key)
        if (charge.customer, charge.amount_cents) != (customer, amount_cents):
            raise IdempotencyConflict(
                f"key {idempotency_key} was first used with other parameters"
            ) from None
    faultpoints.point("charge.after_effect")
    return _charge_view(charge)


def provider_lookup(idempotency_key: str, fencing_token: int | None = None) -> Any:
    """The provider's read path: the charge made under a key, or NOT_HAPPENED.

    A lookup with a fencing token raises the key's fence to it, so that a request from an
    older holder that arrives after this lookup is refused. ``RUNLEDGER_PROVIDER_LOOKUP=down``
    simulates the provider's API being unreachable: the answer is None (cannot know), and the
    run waits for a person or a later lookup.
    """
    if os.environ.get("RUNLEDGER_PROVIDER_LOOKUP") == "down":
        return None
    if not _admit(idempotency_key, fencing_token):
        return None  # a stale holder asks: it gets no answer to act on
    charge = ProviderCharge.objects.filter(idempotency_key=idempotency_key).first()
    return _charge_view(charge) if charge else NOT_HAPPENED


def provider_keys(prefix: str) -> list[str]:
    """The provider's list of idempotency keys under a prefix (for the effect audit)."""
    rows = ProviderCharge.objects.filter(idempotency_key__startswith=prefix)
    return list(rows.values_list("idempotency_key", flat=True)[:10_000])


def outbox_send(*, to: str, subject: str, body: str, idempotency_key: str) -> dict[str, Any]:
    """Queue an email; the message id is the idempotency key, so a resend is a no-op."""
    faultpoints.point("email.before_effect")
    message, _ = OutboxMessage.objects.get_or_create(
        message_id=idempotency_key, defaults={"to": to, "subject": subject, "body": body}
    )
    faultpoints.point("email.after_effect")
    return {"message_id": message.message_id, "to": message.to}


def outbox_search(message_id: str) -> Any:
    message = OutboxMessage.objects.filter(message_id=message_id).first()
    return {"message_id": message.message_id, "to": message.to} if message else NOT_HAPPENED


def outbox_keys(prefix: str) -> list[str]:
    """The outbox's message ids under a prefix (for the effect audit)."""
    rows = OutboxMessage.objects.filter(message_id__startswith=prefix)
    return list(rows.values_list("message_id", flat=True)[:10_000])


def notifier_send(*, channel: str, text: str, idempotency_key: str) -> dict[str, Any]:
    """Post a notification. No read path and no dedup: the key is ignored, as many APIs do."""
    faultpoints.point("notify.before_effect")
    note = Notification.objects.create(channel=channel, text=text)
    faultpoints.point("notify.after_effect")
    return {"notification": note.pk, "channel": channel}


def ledger_append(*, account: str, amount_cents: int, memo: str) -> dict[str, Any]:
    """Append an entry to the accounting ledger: no deduplication, every call appends."""
    faultpoints.point("ledger.before_effect")
    entry = LedgerEntry.objects.create(memo=memo, account=account, amount_cents=amount_cents)
    faultpoints.point("ledger.after_effect")
    return _entry_view(entry)


def ledger_lookup(memo: str) -> Any:
    """The ledger's search by memo: the first entry under it, or NOT_HAPPENED."""
    entry = LedgerEntry.objects.filter(memo=memo).order_by("pk").first()
    return _entry_view(entry) if entry else NOT_HAPPENED


def _entry_view(entry: LedgerEntry) -> dict[str, Any]:
    return {"entry": entry.pk, "account": entry.account, "amount_cents": entry.amount_cents}


def gateway_charge(*, customer: str, amount_cents: int, reference: str) -> dict[str, Any]:
    """Charge through the legacy gateway: no idempotency, no lookup; every call charges."""
    faultpoints.point("gateway.before_effect")
    charge = GatewayCharge.objects.create(
        gateway_ref="gw_" + secrets.token_hex(8),
        customer=customer,
        amount_cents=amount_cents,
        reference=reference,
    )
    faultpoints.point("gateway.after_effect")
    return {"gateway_ref": charge.gateway_ref, "amount_cents": amount_cents}
