"""Teams (issue 35): ``ledger_run.team``, the team a run belongs to (``ledger.teams``), and the
index ``run_team_status`` (team, status, status_changed_at) that a team's lists and counts read.

The column has a constant database default (``'default'``, the shipped RUNLEDGER_DEFAULT_TEAM):
on PostgreSQL adding it rewrites nothing, and every run started before this migration is in
the team ``default``. The index is built ``CONCURRENTLY`` on PostgreSQL (the migration is not
atomic), as 0021's and 0030's: an upgrade takes no lock that blocks the workers' writes.
"""

from django.db import migrations, models

COLUMNS = '("team", "status", "status_changed_at")'


def create(apps, schema_editor):
    concurrently = "CONCURRENTLY " if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(
        f'CREATE INDEX {concurrently}IF NOT EXISTS "run_team_status" ON "ledger_run" {COLUMNS}'
    )


def drop(apps, schema_editor):
    schema_editor.execute('DROP INDEX IF EXISTS "run_team_status"')


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("ledger", "0030_step_usage"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="team",
            field=models.CharField(db_default="default", default="default", max_length=63),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        fields=["team", "status", "status_changed_at"], name="run_team_status"
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
