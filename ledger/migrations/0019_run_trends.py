"""Runs over time per agent and status, kept by the database for the Trends page: RunTrendHour
(the folded hourly totals) and RunTrendDelta (changes not folded yet), and on PostgreSQL the
triggers on ``ledger_run`` that append a delta in the writing transaction: a statement trigger
over the transition table for inserted runs (a COPY of 5,000 runs appends a handful of rows) and
a row trigger for an update that changes a run's status (its WHEN is checked before any function
runs: heartbeats and step writes pay nothing). A run entering a final status carries the bucket
of its duration (``finished_at - created_at``) on log-spaced edges (copied here from
``ledger.selectors.trends.BUCKET_EDGES`` so the migration keeps meaning what it meant).
Deleting runs (retention) takes nothing from the trends: they say what happened. The last 7
days of existing runs are counted in, each once in its current status; CREATE TRIGGER's lock
on ledger_run holds writers off until this migration commits.

On SQLite (the embedded, one-machine default) the page counts from ``ledger_run`` instead.
"""

from django.db import migrations, models

EDGES = "ARRAY[0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 60, 150, 300, 600, 1800, 3600, 10800, 21600, 43200, 86400, 172800, 604800]::float8[]"

CREATE = f"""
CREATE OR REPLACE FUNCTION ledger_run_trend_bucket(status text, created timestamptz, finished timestamptz)
RETURNS smallint AS $$
    SELECT CASE WHEN status IN ('succeeded', 'failed', 'cancelled') AND finished IS NOT NULL
        THEN width_bucket(greatest(extract(epoch FROM finished - created), 0)::float8, {EDGES})::smallint
        ELSE -1::smallint END
$$ LANGUAGE sql IMMUTABLE;
CREATE OR REPLACE FUNCTION ledger_run_trend_inserted() RETURNS trigger AS $$
BEGIN
    INSERT INTO ledger_runtrenddelta (hour, agent, status, bucket, n)
        SELECT date_trunc('hour', status_changed_at, 'UTC'), agent, status,
               ledger_run_trend_bucket(status, created_at, finished_at), count(*)
        FROM ledger_run_trend_new GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION ledger_run_trend_changed() RETURNS trigger AS $$
BEGIN
    INSERT INTO ledger_runtrenddelta (hour, agent, status, bucket, n)
        VALUES (date_trunc('hour', NEW.status_changed_at, 'UTC'), NEW.agent, NEW.status,
                ledger_run_trend_bucket(NEW.status, NEW.created_at, NEW.finished_at), 1);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_run_trend_insert AFTER INSERT ON ledger_run
    REFERENCING NEW TABLE AS ledger_run_trend_new
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_run_trend_inserted();
CREATE TRIGGER ledger_run_trend_update AFTER UPDATE OF status ON ledger_run
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION ledger_run_trend_changed();
INSERT INTO ledger_runtrendhour (hour, agent, status, bucket, n)
    SELECT date_trunc('hour', status_changed_at, 'UTC'), agent, status,
           ledger_run_trend_bucket(status, created_at, finished_at), count(*)
    FROM ledger_run WHERE status_changed_at >= now() - interval '7 days'
    GROUP BY 1, 2, 3, 4;
"""

DROP = """
DROP TRIGGER IF EXISTS ledger_run_trend_insert ON ledger_run;
DROP TRIGGER IF EXISTS ledger_run_trend_update ON ledger_run;
DROP FUNCTION IF EXISTS ledger_run_trend_inserted();
DROP FUNCTION IF EXISTS ledger_run_trend_changed();
DROP FUNCTION IF EXISTS ledger_run_trend_bucket(text, timestamptz, timestamptz);
"""


def _create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0018_run_search'),
    ]

    operations = [
        migrations.CreateModel(
            name='RunTrendDelta',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField()),
                ('agent', models.CharField(max_length=200)),
                ('status', models.CharField(max_length=20)),
                ('bucket', models.SmallIntegerField(default=-1)),
                ('n', models.BigIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name='RunTrendHour',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField()),
                ('agent', models.CharField(max_length=200)),
                ('status', models.CharField(max_length=20)),
                ('bucket', models.SmallIntegerField(default=-1)),
                ('n', models.BigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('hour', 'agent', 'status', 'bucket'), name='run_trend_hour_key')],
            },
        ),
        migrations.RunPython(_create, _drop),
    ]
