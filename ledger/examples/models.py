"""Tables of the simulated downstream systems, so effects can be counted across processes."""

from __future__ import annotations

from django.db import models


class ProviderCharge(models.Model):
    """A payment provider's charges, one per idempotency key (as Stripe keeps them)."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    charge_id = models.CharField(max_length=64, unique=True)
    customer = models.CharField(max_length=200)
    amount_cents = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.charge_id


class OutboxMessage(models.Model):
    """An email outbox whose messages can be searched by message id."""

    message_id = models.CharField(max_length=200, unique=True)
    to = models.CharField(max_length=200)
    subject = models.CharField(max_length=500)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.message_id


class Notification(models.Model):
    """A notifier with no read path and no idempotency: every call is a new message."""

    channel = models.CharField(max_length=200)
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.channel}: {self.text[:40]}"


class GatewayCharge(models.Model):
    """A legacy card gateway: it takes a reference but offers no lookup of past charges."""

    gateway_ref = models.CharField(max_length=64, unique=True)
    customer = models.CharField(max_length=200)
    amount_cents = models.IntegerField()
    reference = models.CharField(max_length=200, help_text="What the caller sent (not indexed).")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.gateway_ref


class ProviderFence(models.Model):
    """The payment provider's fence per idempotency key: the highest fencing token a request or
    lookup under that key carried; a request with a lower one comes from a stale lease holder
    and is refused (counted in ``refused``)."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    token = models.PositiveIntegerField()
    refused = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.idempotency_key} ≥ {self.token}"


class LedgerEntry(models.Model):
    """An append-only accounting ledger: every append is a new entry (no idempotency), and
    entries can be looked up by the memo the caller sent (the effect key)."""

    memo = models.CharField(max_length=200, db_index=True)
    account = models.CharField(max_length=200)
    amount_cents = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.account} {self.amount_cents:+d} ({self.memo})"
