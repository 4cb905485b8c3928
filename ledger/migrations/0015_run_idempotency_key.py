"""Run.idempotency_key (an application's key for one start), and on PostgreSQL a trigger that
NOTIFYs ``runledger_run_settled`` with the run id when a run reaches a state an application
waits for (succeeded, failed, cancelled, needs_attention): ``ledger.waiting`` listens, so a
long-poll answers at the commit instead of polling the table."""

from django.db import migrations, models

CHANNEL = "runledger_run_settled"

CREATE = f"""
CREATE OR REPLACE FUNCTION ledger_run_settled_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{CHANNEL}', NEW.run_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_run_settled
    AFTER UPDATE OF status ON ledger_run
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('succeeded', 'failed', 'cancelled', 'needs_attention'))
    EXECUTE FUNCTION ledger_run_settled_notify();
"""

DROP = """
DROP TRIGGER IF EXISTS ledger_run_settled ON ledger_run;
DROP FUNCTION IF EXISTS ledger_run_settled_notify();
"""


def _create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0014_retention"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="idempotency_key",
            field=models.CharField(blank=True, max_length=200, null=True, unique=True),
        ),
        migrations.RunPython(_create, _drop),
    ]
