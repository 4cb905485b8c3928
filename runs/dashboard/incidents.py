"""What the Incidents page and the bulk actions on a group share: the windows failed runs are
counted in, and the group a request names (its cause as query parameters ``i_status``,
``i_agent``, ``i_step``, ``i_reason``, ``i_sig``)."""

from __future__ import annotations

from datetime import timedelta

from django.http import HttpRequest

from ledger.inputs import queryable
from ledger.models import RunStatus

#: How far back failed runs count (the page's choice; needs-attention runs count whatever age).
WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
DEFAULT_WINDOW = "24h"
INCIDENT_WINDOW_MAX = max(WINDOWS.values())
#: Query parameter → the group's field.
FIELDS = {"i_status": "status", "i_agent": "agent", "i_step": "step", "i_reason": "reason",
          "i_sig": "signature"}  # fmt: skip


def window_of(request: HttpRequest) -> str:
    chosen = str(request.GET.get("since", ""))
    return chosen if chosen in WINDOWS else DEFAULT_WINDOW


def incident_group_of(request: HttpRequest) -> dict[str, str] | None:
    """The group a request names, or None when it names none (a status other than blocked or
    failed, text PostgreSQL cannot hold)."""
    group = {name: str(request.GET.get(param, ""))[:255] for param, name in FIELDS.items()}
    if group["status"] not in (RunStatus.NEEDS_ATTENTION, RunStatus.FAILED):
        return None
    if not all(queryable(v) for v in group.values()):
        return None
    return group
