"""The Trends rollup gets the runs' team (issue 35: a team member's Trends show their teams'
numbers exactly): a ``team`` column on ``ledger_runtrendhour`` and ``ledger_runtrenddelta``
(the existing rows are ``default``'s — every run before 0031_run_team was), the unique key
over (hour, team, agent, status, bucket), and the ``ledger_run`` triggers of 0019_run_trends
writing the run's team. Writes cost what they cost: the same one delta row per status change,
one column wider. Adding a column with a constant default rewrites no table on PostgreSQL 11+.
"""

from django.db import migrations, models


def _functions(team: bool) -> str:
    col, new_col, row_col = (", team", " team,", " NEW.team,") if team else ("", "", "")
    return f"""
CREATE OR REPLACE FUNCTION ledger_run_trend_inserted() RETURNS trigger AS $$
BEGIN
    INSERT INTO ledger_runtrenddelta (hour{col}, agent, status, bucket, n)
        SELECT date_trunc('hour', status_changed_at, 'UTC'),{new_col} agent, status,
               ledger_run_trend_bucket(status, created_at, finished_at), count(*)
        FROM ledger_run_trend_new GROUP BY {"1, 2, 3, 4, 5" if team else "1, 2, 3, 4"};
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION ledger_run_trend_changed() RETURNS trigger AS $$
BEGIN
    INSERT INTO ledger_runtrenddelta (hour{col}, agent, status, bucket, n)
        VALUES (date_trunc('hour', NEW.status_changed_at, 'UTC'),{row_col} NEW.agent, NEW.status,
                ledger_run_trend_bucket(NEW.status, NEW.created_at, NEW.finished_at), 1);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def _with_team(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_functions(team=True))


def _without_team(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_functions(team=False))


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0032_schedule_webhook_team"),
    ]

    operations = [
        migrations.AddField(
            model_name="runtrenddelta",
            name="team",
            field=models.CharField(db_default="default", default="default", max_length=63),
        ),
        migrations.AddField(
            model_name="runtrendhour",
            name="team",
            field=models.CharField(db_default="default", default="default", max_length=63),
        ),
        migrations.RemoveConstraint(model_name="runtrendhour", name="run_trend_hour_key"),
        migrations.AddConstraint(
            model_name="runtrendhour",
            constraint=models.UniqueConstraint(
                fields=("hour", "team", "agent", "status", "bucket"), name="run_trend_team_key"
            ),
        ),
        migrations.RunPython(_with_team, _without_team),
    ]
