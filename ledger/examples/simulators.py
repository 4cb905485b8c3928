"""Simulated downstream systems: a payment provider, an outbox, a notifier.

Each persists to the database so that effects can be counted from any process, and each
behaves as its real counterpart does towards an idempotency key.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any

from django.db import IntegrityError, router, transaction

from ledger.examples import faults
from ledger.examples.models import GatewayCharge, Notification, OutboxMessage, ProviderCharge
from ledger.registry import NOT_HAPPENED


class IdempotencyConflict(Exception):
    """The same key was sent with other parameters (Stripe answers this with an error)."""


def _charge_view(charge: ProviderCharge) -> dict[str, Any]:
    return {
        "charge_id": charge.charge_id,
        "customer": charge.customer,
        "amount_cents": charge.amount_cents,
    }


def provider_charge(*, customer: str, amount_cents: int, idempotency_key: str) -> dict[str, Any]:
    """Create a charge, or return the first charge made under this key."""
    faults.point("charge.before_effect")
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
    faults.point("charge.after_effect")
    return _charge_view(charge)


def provider_lookup(idempotency_key: str) -> Any:
    """The provider's read path: the charge made under a key, or NOT_HAPPENED.

    ``RUNLEDGER_PROVIDER_LOOKUP=down`` simulates the provider's API being unreachable: the
    answer is None (cannot know), and the run waits for a person or a later lookup.
    """
    if os.environ.get("RUNLEDGER_PROVIDER_LOOKUP") == "down":
        return None
    charge = ProviderCharge.objects.filter(idempotency_key=idempotency_key).first()
    return _charge_view(charge) if charge else NOT_HAPPENED


def provider_keys(prefix: str) -> list[str]:
    """The provider's list of idempotency keys under a prefix (for the effect audit)."""
    rows = ProviderCharge.objects.filter(idempotency_key__startswith=prefix)
    return list(rows.values_list("idempotency_key", flat=True)[:10_000])


def outbox_send(*, to: str, subject: str, body: str, idempotency_key: str) -> dict[str, Any]:
    """Queue an email; the message id is the idempotency key, so a resend is a no-op."""
    faults.point("email.before_effect")
    message, _ = OutboxMessage.objects.get_or_create(
        message_id=idempotency_key, defaults={"to": to, "subject": subject, "body": body}
    )
    faults.point("email.after_effect")
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
    faults.point("notify.before_effect")
    note = Notification.objects.create(channel=channel, text=text)
    faults.point("notify.after_effect")
    return {"notification": note.pk, "channel": channel}


def gateway_charge(*, customer: str, amount_cents: int, reference: str) -> dict[str, Any]:
    """Charge through the legacy gateway: no idempotency, no lookup; every call charges."""
    faults.point("gateway.before_effect")
    charge = GatewayCharge.objects.create(
        gateway_ref="gw_" + secrets.token_hex(8),
        customer=customer,
        amount_cents=amount_cents,
        reference=reference,
    )
    faults.point("gateway.after_effect")
    return {"gateway_ref": charge.gateway_ref, "amount_cents": amount_cents}
