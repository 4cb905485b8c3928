"""Who may see and act on which team's runs (``ledger.teams``).

A person holds roles two ways: a role group (``viewer``, ``operator``, ``approver``) or
superuser, which hold in **every** team; and ``TeamRole`` rows, a role in **one** team. A token
(``ApiToken.team``) is bound to one team or to none (every team its person or role reaches).

The rule every page, list, count, search, trend, export, admin view and API operation keeps:

* ``teams_for(user, perm)`` is the set of teams where ``user`` holds ``perm`` (None: every team);
  a list is filtered by it on the server (``scope_runs``), never by hiding rows in a template;
* an object of a team the person may not see answers **404** (not 403: its existence is not
  told); one they may see but not act on answers 403, as before;
* ``user.has_perm(perm)`` (no object) is true when the person holds ``perm`` in some team — it
  lets them onto a page; ``user.has_perm(perm, run)`` (or a team's slug as the object) decides
  for that run. ``TeamRoleBackend`` is the Django authentication backend that answers both.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, TypeVar

from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.db import transaction
from django.db.models import Model, QuerySet
from django.utils import timezone

from ledger.selectors.runs import scoped
from runs.dashboard.models import ROLE_PERMISSIONS, TeamRole

_Q = TypeVar("_Q", bound=Model)
_APP = "runs."


def team_roles(user: Any) -> dict[str, str]:
    """``{team: role}`` of the person's team roles (one query per request, cached on the user)."""
    cached: dict[str, str] | None = getattr(user, "_runledger_team_roles", None)
    if cached is not None:
        return cached
    roles: dict[str, str] = {}
    if getattr(user, "is_authenticated", False) and getattr(user, "pk", None) is not None:
        roles = dict(TeamRole.objects.filter(user_id=user.pk).values_list("team", "role"))
    user._runledger_team_roles = roles
    return roles


def forget(user: Any) -> None:
    """Drop what this request cached of the person's roles (after changing them)."""
    for name in (
        "_runledger_team_roles",
        "_runledger_role",
        "_perm_cache",
        "_group_perm_cache",
        "_user_perm_cache",
    ):
        if hasattr(user, name):
            delattr(user, name)


def _codename(perm: str) -> str:
    return perm[len(_APP) :] if perm.startswith(_APP) else ""


def _global_perms(user: Any) -> set[str]:
    """The permissions the person holds in every team (their groups'; all for a superuser)."""
    if not getattr(user, "is_active", False):
        return set()
    if user.is_superuser:
        return {_APP + p for perms in ROLE_PERMISSIONS.values() for p in perms}
    return set(ModelBackend().get_all_permissions(user))


def teams_for(user: Any, perm: str) -> frozenset[str] | None:
    """The teams where ``user`` holds ``perm`` (``runs.view_dashboard`` …); None: every team."""
    if perm in _global_perms(user):
        return None
    if not getattr(user, "is_active", False):
        return frozenset()
    codename = _codename(perm)
    return frozenset(
        team
        for team, role in team_roles(user).items()
        if codename in ROLE_PERMISSIONS.get(role, ())
    )


def team_of(obj: Any) -> str | None:
    """The team of a run, or of anything holding one (``.team`` or ``.run.team``), or a slug."""
    if isinstance(obj, str):
        return obj
    team = getattr(obj, "team", None)
    if isinstance(team, str):
        return team
    run = getattr(obj, "run", None)
    team = getattr(run, "team", None)
    return team if isinstance(team, str) else None


def may(user: Any, perm: str, obj: Any) -> bool:
    """Whether ``user`` holds ``perm`` in the team of ``obj`` (a run, a row of a run, a slug)."""
    teams = teams_for(user, perm)
    if teams is None:
        return True
    team = team_of(obj)
    return team is not None and team in teams


def scope_runs(
    queryset: QuerySet[_Q], teams: Collection[str] | None, *, field: str = "team"
) -> QuerySet[_Q]:
    """``queryset`` narrowed to runs (or rows of runs: ``field="run__team"``) of ``teams``;
    unchanged for None (every team): the selectors' own ``scoped``, for the web project."""
    return scoped(queryset, teams, field=field)


class TeamRoleBackend(BaseBackend):
    """Answers ``has_perm`` from team roles (after Django's ``ModelBackend``, which answers the
    role groups without an object and nothing with one).

    Without an object: true when some team role grants the permission (the page lets the person
    in; what it lists is scoped). With an object (a run, a row of a run, a team's slug): true
    when the person's groups grant it, or their role in that object's team does."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not getattr(user_obj, "is_active", False) or getattr(user_obj, "is_anonymous", True):
            return set()
        roles = team_roles(user_obj)
        if obj is None:
            return {_APP + p for role in roles.values() for p in ROLE_PERMISSIONS.get(role, ())}
        perms = _global_perms(user_obj)
        team = team_of(obj)
        if team is not None and team in roles:
            perms |= {_APP + p for p in ROLE_PERMISSIONS.get(roles[team], ())}
        return perms

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return perm in self.get_all_permissions(user_obj, obj)


def known_teams() -> list[str]:
    """The teams this installation names (no query of the runs): the default team, the agents'
    declarations, and the teams of people's team roles."""
    from ledger import registry
    from ledger.teams import default_team

    names = {default_team()}
    names.update(a.team for a in registry.agents().values() if a.team)
    names.update(TeamRole.objects.values_list("team", flat=True).distinct())
    return sorted(names)


def teams_shown(user: Any, perm: str = "runs.view_dashboard") -> list[str]:
    """The teams a person's lists offer to filter by (and show a Team column for): their teams,
    or every known team for an every-team role. One team or none: nothing to choose."""
    teams = teams_for(user, perm)
    return sorted(teams) if teams is not None else known_teams()


def set_team_role(
    *, user: Any, team: str, role: str | None, by: str, reason: str = "", source: str = ""
) -> TeamRole | None:
    """Give ``user`` ``role`` in ``team`` (None: take their role there away), audited: one
    ``team_role`` event (before, after, who, why) in the same transaction, none when nothing
    changes. The admin's inline and ``createroleuser --team`` both come here."""
    from ledger.models import AuditAction
    from ledger.teams import check_team
    from ledger.transitions._common import audit_event

    check_team(team)
    if role is not None and role not in ROLE_PERMISSIONS:
        raise ValueError(f"a team role is one of {', '.join(ROLE_PERMISSIONS)}, not {role!r}")
    with transaction.atomic():
        row = TeamRole.objects.select_for_update().filter(user_id=user.pk, team=team).first()
        before = {"user": user.get_username(), "team": team, "role": row.role} if row else None
        if role is None:
            if row is not None:
                row.delete()
            row = None
        elif row is None:
            row = TeamRole.objects.create(user_id=user.pk, team=team, role=role, source=source)
        elif (row.role, row.source) != (role, source):
            row.role, row.source = role, source
            row.save(update_fields=["role", "source"])
        after = {"user": user.get_username(), "team": team, "role": role} if role else None
        if before != after:
            event = audit_event(
                by=by,
                action=AuditAction.TEAM_ROLE,
                at=timezone.now(),
                before=before,
                after=after,
                reason=reason,
            )
            event.save(force_insert=True)
    forget(user)
    return row


def admin_reader(user: Any) -> frozenset[str] | None:
    """The teams a staff member reads in the ledger's admin (``ledger.teams.install_admin_reader``):
    every team for one without team roles (their admin permissions decide, as before teams),
    else the teams where they may read the dashboard."""
    if not team_roles(user):
        return None
    return teams_for(user, "runs.view_dashboard")
