"""Who is on a run (Handover: at most one person a run, "on it"), and the audit's actions for
taking a run, releasing it and leaving a note on it (a note is an audit row)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0019_run_trends'),
    ]

    operations = [
        migrations.CreateModel(
            name='Handover',
            fields=[
                ('run_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('taken_by', models.CharField(db_index=True, max_length=150)),
                ('taken_at', models.DateTimeField()),
            ],
        ),
        migrations.AlterField(
            model_name='auditevent',
            name='action',
            field=models.CharField(choices=[('settlement_propose', 'Settlement Propose'), ('settlement_approve', 'Settlement Approve'), ('settlement_reject', 'Settlement Reject'), ('settlement_apply', 'Settlement Apply'), ('reconcile_lookup', 'Reconcile Lookup'), ('run_start', 'Run Start'), ('stale_accept', 'Stale Accept'), ('reexecute_from', 'Reexecute From'), ('run_resume', 'Run Resume'), ('run_retry', 'Run Retry'), ('run_cancel', 'Run Cancel'), ('run_fork', 'Run Fork'), ('run_clean', 'Run Clean'), ('step_admin_edit', 'Step Admin Edit'), ('run_admin_edit', 'Run Admin Edit'), ('pause', 'Pause'), ('unpause', 'Unpause'), ('run_archive', 'Run Archive'), ('webhook_subscribe', 'Webhook Subscribe'), ('webhook_unsubscribe', 'Webhook Unsubscribe'), ('gate_approve', 'Gate Approve'), ('gate_reject', 'Gate Reject'), ('run_take', 'Run Take'), ('run_release', 'Run Release'), ('run_note', 'Run Note')], db_index=True, max_length=40),
        ),
    ]
