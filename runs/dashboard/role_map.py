"""The identity provider's groups as runledger roles (``RUNLEDGER_OIDC_ROLE_MAP``).

A map names, for each provider group, the roles it grants: ``viewer``, ``operator`` or
``approver`` in one team (``operator@payments``) or in every team (``viewer``), or ``admin``
(a superuser; every team only). Written as JSON::

    {"payments-oncall": "operator@payments", "sre": "viewer", "platform-admins": "admin",
     "audit": ["viewer", "approver@payments"]}

or in a compact text form, one ``group = role[@team]`` per line or separated by ``;`` (a group
named on several entries grants all of them)::

    payments-oncall = operator@payments; sre = viewer; platform-admins = admin

``roles_for(groups, role_map)`` is what a person's groups grant now. No Django models here: the
settings parse the map at start-up with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ledger.teams import is_team

#: The roles a group may grant (``runs.dashboard.models.ROLES``), weakest first: two groups
#: granting different roles in one team give the later one here (a person holds one per team).
RANKS = ("viewer", "operator", "approver", "admin")
TEAM_ROLES = ("viewer", "operator", "approver")


@dataclass(frozen=True)
class Grant:
    role: str
    team: str = ""  # "": every team

    def __str__(self) -> str:
        return f"{self.role}@{self.team}" if self.team else self.role


@dataclass
class Roles:
    """What a person holds: role groups and superuser in every team, one role per team."""

    every_team: set[str] = field(default_factory=set)  # viewer/operator/approver groups
    admin: bool = False
    teams: dict[str, str] = field(default_factory=dict)  # {team: role}

    def __bool__(self) -> bool:
        return self.admin or bool(self.every_team) or bool(self.teams)

    def as_json(self) -> dict[str, object]:
        """How an audit event records them."""
        return {
            "admin": self.admin,
            "every_team": sorted(self.every_team),
            "teams": dict(sorted(self.teams.items())),
        }


def parse_grant(text: str, *, group: str) -> Grant:
    role, _, team = text.strip().partition("@")
    role, team = role.strip(), team.strip()
    if role not in RANKS:
        raise ValueError(
            f"RUNLEDGER_OIDC_ROLE_MAP: group {group!r} maps to {text!r}: the role must be one "
            f"of {', '.join(RANKS)} (optionally @team)"
        )
    if team and role == "admin":
        raise ValueError(
            f"RUNLEDGER_OIDC_ROLE_MAP: group {group!r} maps to {text!r}: admin holds in every "
            "team, it cannot be given in one (write 'admin')"
        )
    if "@" in text and not is_team(team):
        raise ValueError(
            f"RUNLEDGER_OIDC_ROLE_MAP: group {group!r} maps to {text!r}: {team!r} is not a "
            "team (1 to 63 characters from a-z 0-9 _ - starting with a letter or a digit)"
        )
    return Grant(role, team)


def parse_role_map(text: str) -> dict[str, tuple[Grant, ...]]:
    """``{group: grants}`` from the JSON or the compact form; ValueError saying what is wrong."""
    text = text.strip()
    if not text:
        return {}
    pairs = _json_pairs(text) if text.startswith("{") else _compact_pairs(text)
    found: dict[str, list[Grant]] = {}
    for group, value in pairs:
        if not group:
            raise ValueError("RUNLEDGER_OIDC_ROLE_MAP: a group name cannot be empty")
        grants = found.setdefault(group, [])
        grants.extend(g for g in _grants(value, group=group) if g not in grants)
    return {group: tuple(grants) for group, grants in found.items()}


def _grants(value: object, *, group: str) -> list[Grant]:
    values = value if isinstance(value, list) else [value]
    texts = [v for v in values if isinstance(v, str)]
    if not values or len(texts) != len(values):
        raise ValueError(
            f"RUNLEDGER_OIDC_ROLE_MAP: group {group!r} must map to a role (text) or a list of "
            f"roles, not {value!r}"
        )
    return [parse_grant(v, group=group) for v in texts]


def _json_pairs(text: str) -> list[tuple[str, object]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"RUNLEDGER_OIDC_ROLE_MAP is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("RUNLEDGER_OIDC_ROLE_MAP must be a JSON object {group: role}")
    return [(str(k).strip(), v) for k, v in data.items()]


def _compact_pairs(text: str) -> list[tuple[str, object]]:
    pairs: list[tuple[str, object]] = []
    for entry in text.replace("\n", ";").split(";"):
        if not entry.strip():
            continue
        group, sep, role = entry.rpartition("=")
        if not sep:
            raise ValueError(
                f"RUNLEDGER_OIDC_ROLE_MAP: {entry.strip()!r} is not 'group = role[@team]' "
                "(entries are separated by ';' or new lines, or write a JSON object)"
            )
        pairs.append((group.strip(), role.strip()))
    return pairs


def roles_for(groups: Iterable[str], role_map: Mapping[str, Iterable[Grant]]) -> Roles:
    """What ``groups`` grant under ``role_map`` (groups it does not name grant nothing)."""
    roles = Roles()
    for group in sorted(set(groups)):
        for grant in role_map.get(group, ()):
            if grant.role == "admin":
                roles.admin = True
            elif not grant.team:
                roles.every_team.add(grant.role)
            else:
                held = roles.teams.get(grant.team)
                if held is None or RANKS.index(grant.role) > RANKS.index(held):
                    roles.teams[grant.team] = grant.role
    return roles
