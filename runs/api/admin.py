from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from runs.api import tokens
from runs.api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made with ``manage.py create_api_token`` (the secret is printed once);
    here they are listed and revoked."""

    list_display = (
        "name",
        "role",
        "team",
        "user",
        "prefix",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("role", "team")
    search_fields = ("name", "prefix", "team")
    readonly_fields = ("name", "role", "team", "user", "prefix", "created_at", "last_used_at")
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        for token in queryset:
            tokens.token_revoke(name=token.name)
        messages.success(request, f"Revoked {queryset.count()} token(s).")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return (*self.readonly_fields, "revoked_at")
