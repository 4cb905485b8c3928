"""The simulated downstream systems' own records, read-only: what an operator checks before
settling an effect by hand ("did the gateway charge cus_hopper?")."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from ledger.examples.models import GatewayCharge, Notification, OutboxMessage, ProviderCharge


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(ProviderCharge)
class ProviderChargeAdmin(ReadOnly):
    list_display = ("charge_id", "customer", "amount_cents", "idempotency_key", "created_at")
    search_fields = ("charge_id", "customer", "idempotency_key")


@admin.register(GatewayCharge)
class GatewayChargeAdmin(ReadOnly):
    list_display = ("gateway_ref", "customer", "amount_cents", "reference", "created_at")
    search_fields = ("gateway_ref", "customer", "reference")


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnly):
    list_display = ("message_id", "to", "subject", "created_at")
    search_fields = ("message_id", "to")


@admin.register(Notification)
class NotificationAdmin(ReadOnly):
    list_display = ("id", "channel", "text", "created_at")
    search_fields = ("text",)
