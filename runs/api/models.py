"""Service tokens of the HTTP API: stored as a SHA-256 digest, never in clear; revocable."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from runs.dashboard.models import APPROVE_SETTLEMENTS, OPERATE_RUNS, VIEW_DASHBOARD
from runs.dashboard.teams import team_of, teams_for

#: What each role may do through the API (the dashboard's roles, the same names).
ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),
    "operator": frozenset({"read", "start", "operate", "propose", "subscribe"}),
    "approver": frozenset({"read", "approve"}),
}
ROLES = tuple(ROLE_ACTIONS)
#: The dashboard permission a person must hold *now* for their token to do each action: a
#: person's token acts no further than the lesser of its own role and its person's.
ACTION_PERMISSIONS: dict[str, str] = {
    "read": VIEW_DASHBOARD,
    "start": OPERATE_RUNS,
    "operate": OPERATE_RUNS,
    "propose": OPERATE_RUNS,
    "subscribe": OPERATE_RUNS,
    "approve": APPROVE_SETTLEMENTS,
}


class ApiToken(models.Model):
    """A bearer token. ``name`` is what the audit shows (``api:<name>``); a token of a person
    (``user`` set) acts as that person, so the four-eyes rule holds across the dashboard and the
    API, and only such a token may approve."""

    name = models.CharField(max_length=100, unique=True)
    role = models.CharField(max_length=20, choices=[(r, r) for r in ROLES])
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="To recognise a token.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        help_text="The person this token acts as; empty for a service.",
    )
    #: The team the token acts in (``ledger.teams``): it sees and acts on that team's runs only.
    #: Empty: every team (made by an admin, or a person's token acting as far as its person may).
    team = models.CharField(max_length=63, blank=True, default="", db_default="")
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return self.name

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def may(self, action: str, obj: Any = None) -> bool:
        """Without ``obj``: the token may do ``action`` in some team (its role allows it and,
        for a person's token, the person holds it now in some team). With ``obj`` (a run, a row
        of a run, a team's slug): in that object's team."""
        teams = self.teams_for(action)
        if obj is None:
            return teams is None or bool(teams)
        if teams is None:
            return True
        team = team_of(obj)
        return team is not None and team in teams

    def teams_for(self, action: str) -> frozenset[str] | None:
        """The teams where this token may do ``action`` now; None: every team. The one rule
        every router asks (``runs.api.auth``): the token's role, narrowed to its own team when
        it has one, and — a person's token — to the teams where its person holds the action's
        permission at this moment (``runs.dashboard.teams.teams_for``: their role groups hold
        in every team, a ``TeamRole`` in one)."""
        if not self.role_allows(action):
            return frozenset()
        reach: frozenset[str] | None = frozenset({self.team}) if self.team else None
        user = self.user
        if user is not None:
            if not user.is_active:
                return frozenset()
            person = teams_for(user, ACTION_PERMISSIONS[action])
            if person is not None:
                reach = person if reach is None else reach & person
        return reach

    def role_allows(self, action: str) -> bool:
        return action in ROLE_ACTIONS.get(self.role, frozenset())

    def person_allows(self, action: str) -> bool:
        """A person's token: the person holds the action's permission now, in some team."""
        user = self.user
        if user is None:
            return True
        if not user.is_active:
            return False
        person = teams_for(user, ACTION_PERMISSIONS[action])
        return person is None or bool(person)
