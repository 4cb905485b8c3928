"""Completion events: applications' webhook subscriptions (per agent or per run, with a signing
secret), the deliveries' link to their subscription, and the new notification kinds and audit
actions."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0010_step_failures'),
    ]

    operations = [
        migrations.AlterField(
            model_name='auditevent',
            name='action',
            field=models.CharField(choices=[('settlement_propose', 'Settlement Propose'), ('settlement_approve', 'Settlement Approve'), ('settlement_reject', 'Settlement Reject'), ('settlement_apply', 'Settlement Apply'), ('reconcile_lookup', 'Reconcile Lookup'), ('run_start', 'Run Start'), ('stale_accept', 'Stale Accept'), ('reexecute_from', 'Reexecute From'), ('run_resume', 'Run Resume'), ('run_retry', 'Run Retry'), ('run_cancel', 'Run Cancel'), ('run_fork', 'Run Fork'), ('run_clean', 'Run Clean'), ('step_admin_edit', 'Step Admin Edit'), ('run_admin_edit', 'Run Admin Edit'), ('run_archive', 'Run Archive'), ('webhook_subscribe', 'Webhook Subscribe'), ('webhook_unsubscribe', 'Webhook Unsubscribe')], db_index=True, max_length=40),
        ),
        migrations.AlterField(
            model_name='notification',
            name='kind',
            field=models.CharField(choices=[('needs_attention', 'a run needs a person'), ('approval_waiting', 'a settlement waits for approval'), ('reminder', 'still waiting'), ('run.succeeded', 'event: run succeeded'), ('run.failed', 'event: run failed'), ('run.cancelled', 'event: run cancelled'), ('run.needs_attention', 'event: run needs attention')], max_length=30),
        ),
        migrations.CreateModel(
            name='WebhookSubscription',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('url', models.CharField(max_length=2000)),
                ('agent', models.CharField(blank=True, db_index=True, default='', max_length=200)),
                ('run_id', models.CharField(blank=True, db_index=True, default='', max_length=64)),
                ('events', models.JSONField(default=list)),
                ('secret', models.CharField(max_length=200)),
                ('description', models.CharField(blank=True, default='', max_length=200)),
                ('created_at', models.DateTimeField()),
                ('created_by', models.CharField(blank=True, default='', max_length=150)),
                ('removed_at', models.DateTimeField(blank=True, null=True)),
                ('removed_by', models.CharField(blank=True, default='', max_length=150)),
            ],
            options={
                'constraints': [models.CheckConstraint(condition=models.Q(models.Q(('agent', ''), models.Q(('run_id', ''), _negated=True)), models.Q(models.Q(('agent', ''), _negated=True), ('run_id', '')), _connector='OR'), name='webhook_subscription_one_scope')],
            },
        ),
        migrations.AddField(
            model_name='notification',
            name='subscription',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='deliveries', to='ledger.webhooksubscription'),
        ),
    ]
