"""Runs and their steps: ``ledger_run`` (a run of an agent, its lease, its determinism record) and
``ledger_step`` (one row per step of a run: the durable ledger itself).

The ledger's history was squashed before the first release; each migration here names what it
creates and ``replaces`` the migrations it stands for, so that a database migrated on the old
history (kept in tests/support/migration_history/) is seen as having applied this one. Each
migration here replaces a set of old ones that a database could have applied on its own, in
order, so a database stopped at any of those points upgrades too.
"""

import django.db.models.deletion
import ledger.models
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    replaces = [
        ("ledger", "0001_initial"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name='Run',
            fields=[
                ('run_id', models.CharField(default=ledger.models.new_run_id, max_length=64, primary_key=True, serialize=False)),
                ('agent', models.CharField(db_index=True, max_length=200)),
                ('inputs', models.JSONField(default=dict)),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('needs_attention', 'Needs Attention'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='queued', max_length=20)),
                ('reason', models.CharField(blank=True, choices=[('', '—'), ('reconciliation', 'Reconciliation'), ('stale', 'Stale'), ('divergence', 'Divergence'), ('budget', 'Budget'), ('agent_missing', 'Agent Missing')], default='', max_length=20)),
                ('blocked_step_id', models.CharField(blank=True, default='', max_length=255)),
                ('detail', models.TextField(blank=True, default='', help_text='Why the run stopped, in words.')),
                ('result', models.JSONField(blank=True, null=True)),
                ('error', models.TextField(blank=True, default='')),
                ('plan_version', models.CharField(blank=True, default='', max_length=100)),
                ('tool_schema_hash', models.CharField(blank=True, default='', max_length=64)),
                ('code_version', models.CharField(blank=True, default='', max_length=100)),
                ('resume_count', models.PositiveIntegerField(default=0)),
                ('max_resumes', models.PositiveIntegerField(default=10)),
                ('executions', models.PositiveIntegerField(default=0, help_text='Times a worker ran the agent.')),
                ('lease_owner', models.CharField(blank=True, default='', max_length=200)),
                ('lease_token', models.CharField(blank=True, max_length=64, null=True)),
                ('lease_expires_at', models.DateTimeField(blank=True, null=True)),
                ('heartbeat_at', models.DateTimeField(blank=True, null=True)),
                ('parent_kind', models.CharField(blank=True, default='', max_length=20)),
                ('forked_from_step_id', models.CharField(blank=True, default='', max_length=255)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('status_changed_at', models.DateTimeField()),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('parent', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='children', to='ledger.run')),
            ],
        ),
        migrations.CreateModel(
            name='Step',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('step_id', models.CharField(max_length=255)),
                ('input_hash', models.CharField(max_length=64)),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('started', 'Started'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('abandoned', 'Abandoned')], max_length=20)),
                ('result', models.JSONField(blank=True, null=True)),
                ('next_step_id', models.CharField(blank=True, max_length=255, null=True)),
                ('attempt', models.PositiveIntegerField(default=1)),
                ('effect_key', models.CharField(blank=True, max_length=200, null=True)),
                ('updated_at', models.DateTimeField()),
                ('kind', models.CharField(choices=[('pure', 'Pure'), ('read', 'Read'), ('model', 'Model'), ('effect', 'Effect'), ('clock', 'Clock')], max_length=10)),
                ('tool', models.CharField(blank=True, default='', max_length=200)),
                ('seq', models.PositiveIntegerField()),
                ('inputs', models.JSONField(blank=True, null=True)),
                ('inputs_truncated', models.BooleanField(default=False)),
                ('error', models.TextField(blank=True, default='')),
                ('errors', models.JSONField(blank=True, default=list, help_text='One entry per failed attempt.')),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('model_id', models.CharField(blank=True, default='', max_length=200)),
                ('prompt_hash', models.CharField(blank=True, default='', max_length=64)),
                ('settled_by', models.CharField(blank=True, default='', help_text='Set when a person settled this step.', max_length=150)),
                # Indexed here as Django indexes a foreign key; 0005_lean_step_indexes drops it.
                ('run', models.ForeignKey(db_column='run_id', on_delete=django.db.models.deletion.PROTECT, related_name='steps', to='ledger.run')),
            ],
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['status', 'status_changed_at'], name='run_status_age'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['status', 'reason', 'status_changed_at'], name='run_reason_age'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['agent', 'status_changed_at'], name='run_agent_age'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['created_at', 'run_id'], name='run_created'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['status', 'lease_expires_at'], name='run_lease_expiry'),
        ),
        migrations.AddIndex(
            model_name='step',
            index=models.Index(fields=['run', 'seq'], name='step_run_seq'),
        ),
        migrations.AddIndex(
            model_name='step',
            index=models.Index(condition=models.Q(('status', 'started')), fields=['status', 'kind', 'updated_at'], name='step_started_effects'),
        ),
        migrations.AddConstraint(
            model_name='step',
            constraint=models.UniqueConstraint(fields=('run', 'step_id'), name='step_unique_per_run'),
        ),
    ]
