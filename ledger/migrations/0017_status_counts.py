"""Runs per (status, reason) kept by the database: RunStatusCount (the folded totals) and
RunStatusDelta (the changes not folded yet), and on PostgreSQL the triggers on ``ledger_run``
that append a delta in the writing transaction for every inserted run, deleted run (statement
triggers over the transition table: a COPY of 5,000 runs appends a handful of rows) and update
that changes a run's status or reason (a row trigger whose WHEN is checked before any function
runs: heartbeats and step writes pay nothing). TRUNCATE of ledger_run empties both tables. The
existing runs are counted into RunStatusCount here; CREATE TRIGGER's lock on ledger_run holds
writers off until this migration commits, so nothing is counted twice or missed.

On SQLite (the embedded, one-machine default) the dashboard counts with GROUP BY instead: its
schema editor rebuilds a table to alter it, which would drop the triggers silently.
"""

from django.db import migrations, models

CREATE = """
CREATE OR REPLACE FUNCTION ledger_run_count_inserted() RETURNS trigger AS $$
BEGIN
    INSERT INTO ledger_runstatusdelta (status, reason, n)
        SELECT status, reason, count(*) FROM ledger_run_inserted GROUP BY status, reason;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION ledger_run_count_deleted() RETURNS trigger AS $$
BEGIN
    INSERT INTO ledger_runstatusdelta (status, reason, n)
        SELECT status, reason, -count(*) FROM ledger_run_deleted GROUP BY status, reason;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION ledger_run_count_changed() RETURNS trigger AS $$
BEGIN
    INSERT INTO ledger_runstatusdelta (status, reason, n)
        VALUES (OLD.status, OLD.reason, -1), (NEW.status, NEW.reason, 1);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION ledger_run_count_truncated() RETURNS trigger AS $$
BEGIN
    DELETE FROM ledger_runstatusdelta;
    DELETE FROM ledger_runstatuscount;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_run_count_insert AFTER INSERT ON ledger_run
    REFERENCING NEW TABLE AS ledger_run_inserted
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_run_count_inserted();
CREATE TRIGGER ledger_run_count_delete AFTER DELETE ON ledger_run
    REFERENCING OLD TABLE AS ledger_run_deleted
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_run_count_deleted();
CREATE TRIGGER ledger_run_count_update AFTER UPDATE OF status, reason ON ledger_run
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.reason IS DISTINCT FROM NEW.reason)
    EXECUTE FUNCTION ledger_run_count_changed();
CREATE TRIGGER ledger_run_count_truncate AFTER TRUNCATE ON ledger_run
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_run_count_truncated();
INSERT INTO ledger_runstatuscount (status, reason, n)
    SELECT status, reason, count(*) FROM ledger_run GROUP BY status, reason;
"""

DROP = """
DROP TRIGGER IF EXISTS ledger_run_count_insert ON ledger_run;
DROP TRIGGER IF EXISTS ledger_run_count_delete ON ledger_run;
DROP TRIGGER IF EXISTS ledger_run_count_update ON ledger_run;
DROP TRIGGER IF EXISTS ledger_run_count_truncate ON ledger_run;
DROP FUNCTION IF EXISTS ledger_run_count_inserted();
DROP FUNCTION IF EXISTS ledger_run_count_deleted();
DROP FUNCTION IF EXISTS ledger_run_count_changed();
DROP FUNCTION IF EXISTS ledger_run_count_truncated();
"""


def _create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)



class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0016_claude_sessions'),
    ]

    operations = [
        migrations.CreateModel(
            name='RunStatusDelta',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(max_length=20)),
                ('reason', models.CharField(blank=True, default='', max_length=20)),
                ('n', models.BigIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name='RunStatusCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(max_length=20)),
                ('reason', models.CharField(blank=True, default='', max_length=20)),
                ('n', models.BigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('status', 'reason'), name='run_status_count_key')],
            },
        ),
        migrations.RunPython(_create, _drop),
    ]
