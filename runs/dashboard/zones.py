"""Times in the reader's zone: each person's time zone (``Preference.time_zone``, UTC by
default) is made the current one for their requests, so every ``|date`` in a template renders
in it; the templates print the zone beside every time (the ``T`` format: ``CET``, ``UTC``).

The zone is read from the database at sign-in (``user_logged_in``) and kept in the session;
changing it on the Preferences page updates both, so a request costs no query for it. Only
names of the IANA database this machine knows (``zoneinfo.available_timezones()``) are
accepted: anything else is refused with a message.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from functools import cache
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

SESSION_KEY = "runledger.time_zone"
DEFAULT_ZONE = "UTC"


@cache
def known_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) | {DEFAULT_ZONE}


def zone_error(name: str) -> str:
    """Why ``name`` is not a time zone this dashboard accepts, or "" when it is one."""
    if not name:
        return "Enter a time zone, such as UTC or Europe/Paris."
    if name not in known_zones():
        shown = name if len(name) <= 60 else name[:60] + "…"
        return (
            f"{shown!r} is not a time zone of the IANA database: use a name such as UTC, "
            "Europe/Paris or America/New_York (the list under the field)."
        )
    return ""


def stored_zone(user_id: Any) -> str:
    from runs.dashboard.models import Preference

    stored = Preference.objects.filter(user_id=user_id).values_list("time_zone", flat=True)
    return stored.first() or DEFAULT_ZONE


def remember_zone(sender: object, request: HttpRequest, user: object, **kwargs: object) -> None:
    """At sign-in (``user_logged_in``): the person's zone into their new session."""
    session = getattr(request, "session", None)
    if session is not None:
        session[SESSION_KEY] = stored_zone(getattr(user, "pk", None))


def zone_of(request: HttpRequest) -> str:
    """The signed-in reader's zone name: the session's copy (written at sign-in and when they
    change it), else — a session older than this setting — the stored one, else UTC."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return DEFAULT_ZONE
    session = getattr(request, "session", None)
    name = session.get(SESSION_KEY) if session is not None else None
    if not isinstance(name, str):
        # Not written back (a read never saves the session); kept for the rest of this
        # request, so the middleware and the context processor ask the database once.
        name = getattr(request, "_runledger_stored_zone", None) or stored_zone(user.pk)
        request._runledger_stored_zone = name  # type: ignore[attr-defined]
    return name if name in known_zones() else DEFAULT_ZONE


class ReaderTimeZoneMiddleware:
    """Activates the reader's zone for the request (after ``AuthenticationMiddleware``)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        name = zone_of(request)
        if name == DEFAULT_ZONE:
            timezone.deactivate()  # the settings' TIME_ZONE: UTC
            return self.get_response(request)
        timezone.activate(zoneinfo.ZoneInfo(name))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def set_time_zone(request: HttpRequest, name: str) -> None:
    """Store the signed-in reader's zone (already checked with ``zone_error``) and use it from
    this request on."""
    from runs.dashboard.models import Preference

    Preference.objects.update_or_create(
        user_id=int(request.user.pk or 0),
        defaults={"time_zone": name, "updated_at": timezone.now()},
    )
    request.session[SESSION_KEY] = name
