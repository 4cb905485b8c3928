"""Retention that keeps up (issue 24): an index and a mark.

``ledger_retentionmark``: one row, how far retention's walk got (``models.RetentionMark``).

The index: finished runs by ``(finished_at, run_id)``, the order in which
``selectors.runs_to_prune`` walks them (issue 24). Without it every page of a prune read the
whole run table (a sequential scan and a sort per batch of runs).

Partial (succeeded, failed, cancelled only), so the runs in flight never maintain it. On
PostgreSQL it is built ``CONCURRENTLY`` (the migration is not atomic): an upgrade takes no lock
that blocks the workers' writes to ``ledger_run`` while it builds.
"""

from django.db import migrations, models

FINAL = ("succeeded", "failed", "cancelled")
COLUMNS = '("finished_at", "run_id") WHERE "status" IN (\'succeeded\', \'failed\', \'cancelled\')'


def create(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(
        f'CREATE INDEX {concurrently}IF NOT EXISTS "run_finished" ON "ledger_run" {COLUMNS}'
    )


def drop(apps, schema_editor):
    schema_editor.execute('DROP INDEX IF EXISTS "run_finished"')


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0013_pauses_and_executions"),
    ]

    operations = [
        migrations.CreateModel(
            name="RetentionMark",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("finished_at", models.DateTimeField()),
                ("run_id", models.CharField(max_length=64)),
                ("updated_at", models.DateTimeField()),
            ],
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(("status__in", FINAL)),
                        fields=["finished_at", "run_id"],
                        name="run_finished",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
