"""Operator decisions: ``ledger_settlement`` (a person's answer to "did this interrupted effect
happen?", and its approval) and ``ledger_auditevent`` (who changed what, when and why), which the
database keeps append-only with a trigger; and the optimistic-concurrency ``version`` of runs
and steps.

The audit action choices are the current ones (choices are not in the database: the old history
added them one migration at a time).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# Audit events are append-only, enforced by the database too. PostgreSQL refuses UPDATE and
# DELETE (a test flush uses TRUNCATE, which row triggers do not see); SQLite refuses UPDATE
# only, because Django flushes SQLite test databases with DELETE.
PG_UP = """
CREATE FUNCTION ledger_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger_auditevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER ledger_audit_append_only BEFORE UPDATE OR DELETE ON ledger_auditevent
    FOR EACH ROW EXECUTE FUNCTION ledger_audit_append_only();
"""
PG_DOWN = """
DROP TRIGGER IF EXISTS ledger_audit_append_only ON ledger_auditevent;
DROP FUNCTION IF EXISTS ledger_audit_append_only();
"""
SQLITE_UP = """
CREATE TRIGGER ledger_audit_append_only BEFORE UPDATE ON ledger_auditevent
BEGIN SELECT RAISE(ABORT, 'ledger_auditevent is append-only (UPDATE refused)'); END;
"""
SQLITE_DOWN = "DROP TRIGGER IF EXISTS ledger_audit_append_only;"


def _run(sql_by_vendor):
    def run(apps, schema_editor):
        sql = sql_by_vendor.get(schema_editor.connection.vendor)
        if sql:
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):

    replaces = [
        ("ledger", "0002_operator_decisions"),
    ]

    dependencies = [
        ("ledger", "0001_runs_and_steps"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='version',
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
        migrations.AddField(
            model_name='step',
            name='version',
            field=models.PositiveIntegerField(db_default=1, default=1),
        ),
        migrations.CreateModel(
            name='Settlement',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('step_id_text', models.CharField(max_length=255, verbose_name='step id')),
                ('effect_key', models.CharField(blank=True, default='', max_length=200)),
                ('outcome', models.CharField(choices=[('happened', 'it happened'), ('not_happened', 'it did not happen'), ('abandon', 'abandon')], max_length=20)),
                ('result', models.JSONField(blank=True, null=True)),
                ('reason', models.TextField()),
                ('status', models.CharField(choices=[('proposed', 'Proposed'), ('applied', 'Applied'), ('rejected', 'Rejected'), ('superseded', 'Superseded')], default='proposed', max_length=20)),
                ('approval_required', models.BooleanField(default=True)),
                ('step_version', models.PositiveIntegerField()),
                ('proposed_by_name', models.CharField(max_length=150)),
                ('decided_by_name', models.CharField(blank=True, default='', max_length=150)),
                ('decided_at', models.DateTimeField(blank=True, null=True)),
                ('decision_reason', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField()),
                ('decided_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('proposed_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='settlements', to='ledger.run')),
                # Renamed step_row (and step_id_text step_id) by 0004_settlement_step_row_and_step_id.
                ('step', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='settlements', to='ledger.step')),
            ],
        ),
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('actor', models.CharField(db_index=True, max_length=150)),
                ('at', models.DateTimeField(db_index=True)),
                ('action', models.CharField(choices=[('settlement_propose', 'Settlement Propose'), ('settlement_approve', 'Settlement Approve'), ('settlement_reject', 'Settlement Reject'), ('settlement_apply', 'Settlement Apply'), ('reconcile_lookup', 'Reconcile Lookup'), ('run_start', 'Run Start'), ('stale_accept', 'Stale Accept'), ('reexecute_from', 'Reexecute From'), ('run_resume', 'Run Resume'), ('run_retry', 'Run Retry'), ('run_cancel', 'Run Cancel'), ('run_fork', 'Run Fork'), ('run_clean', 'Run Clean'), ('step_admin_edit', 'Step Admin Edit'), ('run_admin_edit', 'Run Admin Edit'), ('run_archive', 'Run Archive')], db_index=True, max_length=40)),
                ('run_id', models.CharField(blank=True, db_index=True, default='', max_length=64)),
                ('step_id', models.CharField(blank=True, default='', max_length=255)),
                ('before', models.JSONField(blank=True, null=True)),
                ('after', models.JSONField(blank=True, null=True)),
                ('reason', models.TextField(blank=True, default='')),
                ('settlement', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='events', to='ledger.settlement')),
            ],
            options={
                'ordering': ['-at', '-id'],
            },
        ),
        migrations.AddIndex(
            model_name='settlement',
            index=models.Index(fields=['status', 'created_at'], name='settlement_status_age'),
        ),
        migrations.AddIndex(
            model_name='settlement',
            index=models.Index(fields=['step', 'status'], name='settlement_step_status'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(fields=['run_id', 'at'], name='audit_run_at'),
        ),
        migrations.RunPython(
            _run({"postgresql": PG_UP, "sqlite": SQLITE_UP}),
            _run({"postgresql": PG_DOWN, "sqlite": SQLITE_DOWN}),
        ),
    ]
