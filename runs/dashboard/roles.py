"""Putting a user in a dashboard role (the createroleuser command and the tests use this)."""

from __future__ import annotations

from django.contrib.auth.models import Group, User

from runs.dashboard.models import ROLE_PERMISSIONS, ROLES
from runs.dashboard.teams import team_roles


def user_set_role(*, user: User, role: str) -> User:
    """Make ``user`` hold exactly ``role``: one role group, or a superuser for ``admin``."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    admin = role == "admin"
    user.is_superuser = user.is_staff = admin
    user.save(update_fields=["is_superuser", "is_staff"])
    groups = [] if admin else [Group.objects.get(name=role)]
    user.groups.remove(*Group.objects.filter(name__in=list(ROLE_PERMISSIONS)))
    user.groups.add(*groups)
    return user


def role_of(user: User, team: str | None = None) -> str:
    """The strongest role a user holds in every team ('' when none); given ``team``, the
    stronger of that and their role in that team (``TeamRole``)."""
    if team is not None:
        return _stronger(role_of(user), team_roles(user).get(team, ""))
    cached: str | None = getattr(user, "_runledger_role", None)
    if cached is not None:
        return cached
    role = ""
    if user.is_superuser:
        role = "admin"
    else:
        names = {g.name for g in user.groups.all()}
        role = next((r for r in ("approver", "operator", "viewer") if r in names), "")
    user._runledger_role = role  # type: ignore[attr-defined]  # one query per request
    return role


#: The roles, weakest first: a stronger one may do what a weaker one may (answer a question).
RANKS = ("viewer", "operator", "approver", "admin")


def _stronger(a: str, b: str) -> str:
    ranks = {r: i for i, r in enumerate(RANKS)}
    return max((r for r in (a, b) if r in ranks), key=lambda r: ranks[r], default="")


def roles_shown(user: User) -> list[tuple[str, str]]:
    """What the header says of the person: ``[("", role)]`` for a role in every team, then
    ``(team, role)`` for each team role stronger than it (none when they hold no role)."""
    every = role_of(user)
    shown = [("", every)] if every else []
    for team, role in sorted(team_roles(user).items()):
        if _stronger(every, role) != every:
            shown.append((team, role))
    return shown


def role_at_least(user: User, role: str, team: str | None = None) -> bool:
    """Whether ``user`` holds ``role`` or a stronger one (``ctx.ask(role=...)``), in every team
    or, given ``team``, in that one."""
    held = role_of(user, team)
    return bool(held) and held in RANKS and role in RANKS and RANKS.index(held) >= RANKS.index(role)
