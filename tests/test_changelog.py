"""The CHANGELOG (and the docs) name only migrations that exist: an upgrader reads them to plan
a maintenance window, so a wrong name sends them looking for a migration that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.apps import apps

pytestmark = pytest.mark.sqlite_ok

ROOT = Path(__file__).resolve().parent.parent
#: ``0014_retention`` or ``ledger.0014_retention`` (an app label before it).
NAMED = re.compile(r"(?:\b([a-z_]+)\.)?\b(\d{4}_[a-z0-9_]*[a-z0-9])\b")


def _migrations() -> dict[str, set[str]]:
    """Every installed app's migration names, by app label."""
    out: dict[str, set[str]] = {}
    for config in apps.get_app_configs():
        folder = Path(config.path) / "migrations"
        out[config.label] = {p.stem for p in folder.glob("0*.py")}
    return out


def named_migrations(text: str) -> list[tuple[str | None, str]]:
    return [(m.group(1), m.group(2)) for m in NAMED.finditer(text)]


def _pages() -> list[Path]:
    return [ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_migration_the_changelog_and_the_docs_name_exists() -> None:
    known = _migrations()
    everywhere = set().union(*known.values())
    wrong = []
    for page in _pages():
        for label, name in named_migrations(page.read_text()):
            found = known.get(label, set()) if label in known else everywhere
            if name not in found:
                wrong.append(f"{page.relative_to(ROOT)}: {label + '.' if label else ''}{name}")
    assert wrong == []
    assert len(named_migrations((ROOT / "CHANGELOG.md").read_text())) >= 10  # it does read them


def test_a_wrong_name_is_found() -> None:
    named = named_migrations("**Migration `ledger.0010_retention`** and `0016_status_counts`")
    assert named == [("ledger", "0010_retention"), (None, "0016_status_counts")]
