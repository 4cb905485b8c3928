"""Lean step indexes: ledger_step loses the two indexes Django made for the run foreign key
(issue 12).

``ledger_step_run_id_9b3bd036`` (run_id) and, on PostgreSQL, its ``_like`` twin
(run_id varchar_pattern_ops) are covered by the unique (run_id, step_id) index and by
``step_run_seq`` (run_id, seq): every query on steps filters by an exact run id (EXPLAIN in
tests/ledger/transitions/test_step_write_pg.py), and no query matches a step's run id with LIKE. Each step write
maintained them for nothing.
"""

import django.db.models.deletion
from django.db import migrations, models

NAME = "ledger_step_run_id_9b3bd036"


def drop(apps, schema_editor):
    schema_editor.execute(f'DROP INDEX IF EXISTS "{NAME}"')
    schema_editor.execute(f'DROP INDEX IF EXISTS "{NAME}_like"')


def recreate(apps, schema_editor):
    schema_editor.execute(f'CREATE INDEX "{NAME}" ON "ledger_step" ("run_id")')
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f'CREATE INDEX "{NAME}_like" ON "ledger_step" ("run_id" varchar_pattern_ops)'
        )


class Migration(migrations.Migration):
    replaces = [
        ("ledger", "0006_perf12_lean_step_indexes"),
    ]

    dependencies = [
        ("ledger", "0004_settlement_step_row_and_step_id"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="step",
                    name="run",
                    field=models.ForeignKey(
                        db_column="run_id",
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="steps",
                        to="ledger.run",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop, recreate)],
        ),
    ]
