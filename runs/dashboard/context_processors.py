"""The template context processor of the dashboard: what every page needs (the signed-in user's
role)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from runs.dashboard.roles import role_of


def dashboard(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    role = role_of(user) if user is not None and user.is_authenticated else ""  # type: ignore[arg-type]
    return {
        "role": role,
        "refresh_seconds": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
        "admin_mounted": bool(settings.RUNLEDGER_ADMIN_URL),
    }
