"""Changes to people rather than runs, audited as every human change is: a person's roles
replaced from their identity provider's groups at sign-in (``runs.dashboard.sso``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ledger.models import AuditAction, AuditEvent
from ledger.transitions._common import record


def roles_replaced(
    *, by: str, before: dict[str, Any], after: dict[str, Any], reason: str, at: datetime
) -> AuditEvent:
    """Record that a person's roles went from ``before`` to ``after`` (call it inside the
    transaction that changes them); ``by`` is the person, ``reason`` says from which groups."""
    return record(
        by=by, action=AuditAction.SSO_ROLES, at=at, before=before, after=after, reason=reason
    )
