"""The template context processor of the dashboard: what every page needs (the signed-in user's
role, runledger's version for the footer)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

import ledger
from runs.dashboard.roles import role_of
from runs.dashboard.teams import team_roles
from runs.dashboard.zones import zone_of


def dashboard(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    signed_in = user is not None and user.is_authenticated
    role = role_of(user) if signed_in else ""  # type: ignore[arg-type]
    return {
        "role": role,
        # {team: role} of the person's roles in one team (shown beside the role held in all).
        "team_roles": team_roles(user) if signed_in else {},
        "refresh_seconds": settings.RUNLEDGER_LIST_REFRESH_SECONDS,
        "admin_mounted": bool(settings.RUNLEDGER_ADMIN_URL),
        "nav_section": nav_section(request),
        "zone_name": zone_of(request),
        "runledger_version": ledger.__version__,
    }


#: The top navigation's sections, by the URL names under each (for ``aria-current``).
_SECTIONS = {
    "settlements": "settle",
    "settle": "settle",
    "approvals": "approvals",
    "approval": "approvals",
    "audit": "audit",
    "notifications": "notifications",
    "effect_audits": "effects",
    "effect_audit": "effects",
    "effect_audit_run": "effects",
    "deploy": "deploy",
    "pauses": "pauses",
    "pacing": "pacing",
    "schedules": "schedules",
    "trends": "trends",
    "alerts": "alerts",
    "incidents": "incidents",
    "incident_group": "incidents",
    "preferences": "preferences",
}


def nav_section(request: HttpRequest) -> str:
    """The top navigation's entry for this page ("" when none is), marked ``aria-current``."""
    match = getattr(request, "resolver_match", None)
    if match is None or match.namespace != "runs":
        return ""
    if match.url_name == "list":
        attention = request.GET.get("status") == "needs_attention"
        return "attention" if attention else "runs"
    return _SECTIONS.get(match.url_name or "", "")
