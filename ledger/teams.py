"""Teams: every run belongs to one (``Run.team``), and who may see or act on it is decided per
team (``runs.dashboard.teams`` for people, ``ApiToken.team`` for tokens).

A team is a slug: 1 to 63 characters from ``a-z 0-9 _ -``, starting with a letter or a digit.
A run's team is the one its start names (``start_run(team=...)``, the API's ``team``), else its
agent's declaration (``@agent(team=...)``), else ``RUNLEDGER_DEFAULT_TEAM``; a run made from
another (a fork, a continuation) keeps its parent's team.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ledger.errors import InvalidInput

MAX_TEAM_CHARS = 63
_TEAM = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def is_team(value: object) -> bool:
    return isinstance(value, str) and _TEAM.fullmatch(value) is not None


def check_team(value: object) -> str:
    """``value`` when it is a team's slug, else ``InvalidInput`` saying what one is."""
    if not is_team(value):
        shown = value[:80] if isinstance(value, str) else value
        raise InvalidInput(
            f"the team {shown!r} is not allowed: use 1 to {MAX_TEAM_CHARS} characters from "
            "a-z 0-9 _ - starting with a letter or a digit"
        )
    assert isinstance(value, str)
    return value


def default_team() -> str:
    from ledger.conf import conf

    return str(conf.RUNLEDGER_DEFAULT_TEAM)


#: The web project's answer to "which teams' runs may this staff member read in the admin?"
#: (None: every team). The project installs it (``runs.dashboard`` at start-up), so the ledger's
#: admin scopes its lists without importing the project; unset, every team.
_admin_reader: Callable[[Any], frozenset[str] | None] | None = None


def install_admin_reader(fn: Callable[[Any], frozenset[str] | None]) -> None:
    global _admin_reader
    _admin_reader = fn


def admin_reader_teams(user: Any) -> frozenset[str] | None:
    """The teams ``user`` may read in the admin (None: every team; see ``install_admin_reader``)."""
    return None if _admin_reader is None else _admin_reader(user)
