"""Putting a user in a dashboard role (the createroleuser command and the tests use this)."""

from __future__ import annotations

from django.contrib.auth.models import Group, User

from runs.models import ROLE_PERMISSIONS, ROLES


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
    if user.is_superuser:
        return "admin"
    names = {g.name for g in user.groups.all()}
    for role in ("approver", "operator", "viewer"):
        if role in names:
            return role
    return ""
