"""Tokens and cost of model steps (issue 35): ``ledger_step.tokens_in``, ``tokens_out`` and
``cost_usd``, filled as a model step is recorded (``ledger.usage``), and the partial index
``step_model_usage`` (``finished_at`` of model steps with tokens) that the per-agent figures
over a window read (Trends, ``GET /api/v1/agents/usage``).

The columns are nullable with no default: on PostgreSQL adding them rewrites nothing. Steps
recorded before this migration have none (their answers are still in ``result``). The index is
built ``CONCURRENTLY`` on PostgreSQL (the migration is not atomic), as 0021's: an upgrade takes
no lock that blocks the workers' writes to ``ledger_step``.
"""

from django.db import migrations, models

COLUMNS = '("finished_at") WHERE "kind" = \'model\' AND "tokens_in" IS NOT NULL'


def create(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(
        f'CREATE INDEX {concurrently}IF NOT EXISTS "step_model_usage" ON "ledger_step" {COLUMNS}'
    )


def drop(apps, schema_editor):
    schema_editor.execute('DROP INDEX IF EXISTS "step_model_usage"')


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0029_langgraph_checkpoints"),
    ]

    operations = [
        migrations.AddField(
            model_name="step",
            name="tokens_in",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="tokens_out",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="cost_usd",
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=14, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="step",
                    index=models.Index(
                        condition=models.Q(("kind", "model"), ("tokens_in__isnull", False)),
                        fields=["finished_at"],
                        name="step_model_usage",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
