"""The ledger's migration history explains itself, and every database already migrated upgrades.

``ledger/migrations`` is linear, each migration named for what it creates, and together they
``replace`` the old history (14 migrations: four branches tagged op10/agent13/perf12/prod11 and
four merges), kept as a fixture in tests/support/migration_history/old_ledger_migrations. A
database built with the old history, whole or stopped where a new migration ends, is migrated
with the new one here, in a scratch database of its own: nothing that was applied runs again,
its rows stay, and its schema is then that of a database made with the new history alone.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.test.utils import override_settings

pytestmark = [pytest.mark.sqlite_ok]

OLD_MODULE = "tests.support.migration_history.old_ledger_migrations"
OLD = {"ledger": OLD_MODULE}
BRANCH_TAG = re.compile(r"(op|agent|perf|prod|rev|issue)\d+|merge", re.IGNORECASE)
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

Key = tuple[str, str]


def _ledger_migrations(loader: MigrationLoader) -> dict[str, Any]:
    return {name: m for (app, name), m in loader.disk_migrations.items() if app == "ledger"}


def _all_new() -> list[Any]:
    """Every ledger migration in order (the graph's order: linearity is tested separately)."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    plan = loader.graph.forwards_plan(loader.graph.leaf_nodes("ledger")[0])
    return [loader.graph.nodes[key] for key in plan if key[0] == "ledger"]


def _new_history() -> list[Any]:
    """The migrations that replace the old history: a prefix of them all (migrations made after
    the squash replace nothing and follow it)."""
    migrations = _all_new()
    squashed = [m for m in migrations if m.replaces]
    assert migrations[: len(squashed)] == squashed, "a migration replacing old ones comes late"
    return squashed


def _after_squash() -> list[str]:
    return [m.name for m in _all_new() if not m.replaces]


def _old_loader() -> MigrationLoader:
    with override_settings(MIGRATION_MODULES=OLD):
        return MigrationLoader(None, ignore_no_migrations=True)


# --- the history itself ------------------------------------------------------------------------


def test_the_ledger_history_is_linear_and_its_names_carry_no_branch_tag_or_merge() -> None:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    migrations = _ledger_migrations(loader)
    assert migrations, "no ledger migrations found"
    for name, migration in migrations.items():
        assert not BRANCH_TAG.search(name), f"{name} carries a branch tag or is a merge"
        inside = [dep for dep in migration.dependencies if dep[0] == "ledger"]
        assert len(inside) <= 1, f"{name} depends on {inside}: a merge"
    assert len(loader.graph.leaf_nodes("ledger")) == 1
    assert len(loader.graph.root_nodes("ledger")) == 1
    assert [m.name for m in _all_new()] == sorted(migrations)  # numbered in their order


def test_the_new_migrations_replace_each_old_one_once_and_end_where_an_old_database_can() -> None:
    """Django takes a squashed migration as applied when all it replaces are, and can use it on
    a database where none are; with the old files gone, on a database that applied only some
    of one's replaced migrations Django drops it, quietly, and the rest of its schema is never
    made. So each old migration is replaced exactly once,
    and the new migrations up to any point replace a set of old ones closed under their
    dependencies: a state a database migrated on the old history really could be in."""
    old_graph = _old_loader().graph
    old = {key for key in old_graph.nodes if key[0] == "ledger"}
    assert len(old) == 14
    replaced: list[Key] = []
    for migration in _new_history():
        assert migration.replaces, f"{migration.name} replaces nothing"
        replaced.extend(migration.replaces)
        done = set(replaced)
        for key in migration.replaces:
            assert key in old_graph.node_map, f"{migration.name} replaces {key}: no such migration"
            missing = {p.key for p in old_graph.node_map[key].parents if p.key[0] == "ledger"}
            missing -= done
            assert not missing, f"{migration.name}: {key[1]} needs {missing} replaced first"
    assert sorted(replaced) == sorted(old), "each old migration is replaced exactly once"


@pytest.mark.django_db
def test_makemigrations_finds_no_changes() -> None:
    call_command("makemigrations", "ledger", check=True, dry_run=True, verbosity=0)


# --- databases built with the old history, upgraded -------------------------------------------


@contextmanager
def _scratch_database(directory: Path) -> Iterator[str]:
    """A connection alias to a new, empty database beside the test database (PostgreSQL: a
    ``mig_*`` database on the same server, dropped afterwards; SQLite: a file)."""
    default = connections["default"]
    alias = f"mig_{secrets.token_hex(6)}"
    config = dict(default.settings_dict)
    postgres = default.vendor == "postgresql"
    if postgres:
        with default.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{alias}"')
        config["NAME"] = alias
    else:
        config["NAME"] = str(directory / f"{alias}.sqlite3")
    connections.settings[alias] = config
    try:
        yield alias
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]
        if postgres:
            with default.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{alias}" WITH (FORCE)')


PG_SCHEMA = {
    "columns": """
        SELECT table_name, column_name, ordinal_position, data_type, character_maximum_length,
               is_nullable, column_default, is_identity
        FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name LIKE 'ledger\\_%'""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = current_schema() AND tablename LIKE 'ledger\\_%'""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE conrelid::regclass::text LIKE 'ledger\\_%'""",
    "triggers": """
        SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid) FROM pg_trigger
        WHERE NOT tgisinternal AND tgrelid::regclass::text LIKE 'ledger\\_%'""",
    "functions": """
        SELECT proname, pg_get_functiondef(oid) FROM pg_proc WHERE proname LIKE 'ledger\\_%'""",
}
SQLITE_SCHEMA = {
    "objects": """
        SELECT type, name, tbl_name, sql FROM sqlite_master
        WHERE tbl_name LIKE 'ledger\\_%' ESCAPE '\\'""",
}


def _schema(alias: str) -> dict[str, list[tuple[Any, ...]]]:
    """The ledger's tables, columns (in order), indexes, constraints and triggers."""
    connection = connections[alias]
    queries = PG_SCHEMA if connection.vendor == "postgresql" else SQLITE_SCHEMA
    schema = {}
    with connection.cursor() as cursor:
        for part, sql in queries.items():
            cursor.execute(sql)
            schema[part] = sorted(tuple(row) for row in cursor.fetchall())
    return schema


def _applied(alias: str) -> set[str]:
    recorded = MigrationRecorder(connections[alias]).applied_migrations()
    return {name for app, name in recorded if app == "ledger"}


@pytest.fixture(scope="module")
def fresh_schema(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[tuple[Any, ...]]]:
    """The schema of an empty database migrated with the new history alone."""
    with django_db_blocker.unblock(), _scratch_database(tmp_path_factory.mktemp("fresh")) as alias:
        leaf = MigrationLoader(None).graph.leaf_nodes("ledger")
        MigrationExecutor(connections[alias]).migrate(leaf)
        schema = _schema(alias)
    assert {"ledger_run", "ledger_step", "ledger_runarchive"} <= {
        row[0] if connections["default"].vendor == "postgresql" else row[2]
        for row in next(iter(schema.values()))
    }
    return schema


NEW_NAMES = [m.name for m in _new_history()]
REPLACES = {m.name: set(m.replaces) for m in _new_history()}


@pytest.mark.parametrize("stop", range(1, len(NEW_NAMES) + 1), ids=lambda k: NEW_NAMES[k - 1])
def test_a_database_migrated_on_the_old_history_upgrades_in_place(
    stop: int,
    fresh_schema: dict[str, list[tuple[Any, ...]]],
    django_db_blocker: Any,
    tmp_path: Path,
) -> None:
    """The old history applied as far as the new migration ``stop`` goes (the last one: all of
    it, as every database made from main before the squash), a run and a step written, then the
    new history migrated: the new migrations up to ``stop`` count as applied without running,
    the rest run, the rows stay, and the schema is that of a fresh database."""
    done = set().union(*(REPLACES[name] for name in NEW_NAMES[:stop]))
    with django_db_blocker.unblock(), _scratch_database(tmp_path) as alias:
        connection = connections[alias]
        with override_settings(MIGRATION_MODULES=OLD):
            old = MigrationExecutor(connection)
            graph = old.loader.graph
            # What a database that applied ``done`` had applied (the same set when the history
            # is right; tested above): the old history's own graph decides.
            known = done & set(graph.nodes)
            built = {key for k in known for key in graph.forwards_plan(k) if key[0] == "ledger"}
            targets = [k for k in built if not {c.key for c in graph.node_map[k].children} & built]
            old.migrate(targets)
            assert _applied(alias) == {name for _, name in built}
            state = old.loader.project_state(targets)
        Run = state.apps.get_model("ledger", "Run")
        Step = state.apps.get_model("ledger", "Step")
        run = Run.objects.using(alias).create(
            run_id="run_from_the_old_history",
            agent="demo",
            inputs={"n": 1},
            status="succeeded",
            created_at=NOW,
            updated_at=NOW,
            status_changed_at=NOW,
        )
        Step.objects.using(alias).create(
            run=run,
            step_id="fetch",
            input_hash="0" * 64,
            status="succeeded",
            result={"ok": True},
            kind="read",
            seq=1,
            updated_at=NOW,
        )

        new = MigrationExecutor(connection)
        plan = new.migration_plan(new.loader.graph.leaf_nodes("ledger"))
        names = [m.name for m, backwards in plan if m.app_label == "ledger"]
        assert names == NEW_NAMES[stop:] + _after_squash()
        assert not any(backwards for _, backwards in plan)
        call_command("migrate", "ledger", database=alias, interactive=False, verbosity=0)
        applied = _applied(alias)
        assert set(NEW_NAMES + _after_squash()) <= applied, (
            "every new migration is recorded as applied"
        )
        for name in NEW_NAMES[stop:]:
            assert {n for _, n in REPLACES[name]} <= applied  # Django records what they replace

        from ledger.models import Run as CurrentRun
        from ledger.models import Step as CurrentStep

        step = CurrentStep.objects.using(alias).select_related("run").get()
        assert (step.run.run_id, step.run.agent, step.run.inputs) == (run.run_id, "demo", {"n": 1})
        assert (step.step_id, step.result, step.version, step.run.version) == (
            "fetch",
            {"ok": True},
            1,
            1,
        )
        assert CurrentRun.objects.using(alias).count() == 1
        upgraded = _schema(alias)
        differences = {
            part: {
                "upgraded only": sorted(set(upgraded[part]) - set(rows)),
                "fresh only": sorted(set(rows) - set(upgraded[part])),
            }
            for part, rows in fresh_schema.items()
            if upgraded[part] != rows
        }
        assert not differences, differences
