"""Putting a user in a dashboard role (the createroleuser command and the tests use this)."""

from __future__ import annotations

from django.contrib.auth.models import Group, User

from runs.dashboard.models import ROLE_PERMISSIONS, ROLES


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


def role_of(user: User) -> str:
    """The strongest role a user holds, for display ('' when none)."""
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


def role_at_least(user: User, role: str) -> bool:
    """Whether ``user`` holds ``role`` or a stronger one (``ctx.ask(role=...)``)."""
    held = role_of(user)
    return bool(held) and held in RANKS and role in RANKS and RANKS.index(held) >= RANKS.index(role)
