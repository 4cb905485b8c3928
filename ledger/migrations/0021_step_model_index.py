"""The model steps of a run, by an index (issue 22): ``(run_id, seq) WHERE kind = 'model'``.

Every transcript on the run page (a tool-use loop's, PydanticAI's, the OpenAI Agents SDK's) is
read from a run's model steps. Without the index each read filtered all of a run's rows: on a
10,000-step run three such reads were ~25 ms of the page. Partial, so read, effect and clock
steps never maintain it. On PostgreSQL it is built ``CONCURRENTLY`` (the migration is not
atomic): an upgrade takes no lock that blocks the workers' writes to ``ledger_step``.
"""

from django.db import migrations, models

COLUMNS = '("run_id", "seq") WHERE "kind" = \'model\''


def create(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(
        f'CREATE INDEX {concurrently}IF NOT EXISTS "step_run_model" ON "ledger_step" {COLUMNS}'
    )


def drop(apps, schema_editor):
    schema_editor.execute('DROP INDEX IF EXISTS "step_run_model"')


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0020_handover"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="step",
                    index=models.Index(
                        condition=models.Q(("kind", "model")),
                        fields=["run", "seq"],
                        name="step_run_model",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
