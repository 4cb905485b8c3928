"""Effect audits: ``ledger_effectaudit`` (one pass comparing the ledger's effects with what the
downstream systems hold, resumable from its cursor) and ``ledger_effectauditfinding`` (each
difference it found)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    replaces = [
        ("ledger", "0006_agent13_effect_audit"),
    ]

    dependencies = [
        ("ledger", "0006_run_titles_and_notifications"),
    ]

    operations = [
        migrations.CreateModel(
            name='EffectAudit',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('by', models.CharField(blank=True, default='', max_length=150)),
                ('agent', models.CharField(blank=True, default='', max_length=100)),
                ('since', models.DateTimeField(blank=True, null=True)),
                ('cursor', models.BigIntegerField(default=0)),
                ('checked', models.PositiveIntegerField(default=0)),
                ('skipped', models.PositiveIntegerField(default=0)),
                ('unanswered', models.PositiveIntegerField(default=0)),
                ('listed', models.PositiveIntegerField(default=0)),
                ('finished', models.BooleanField(default=False)),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='EffectAuditFinding',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('difference', models.CharField(choices=[('missing_downstream', 'the ledger says done; the downstream system has nothing'), ('unexpected_downstream', 'the ledger says failed or abandoned; the downstream system has it'), ('result_differs', "the ledger's result differs from the downstream system's"), ('unknown_to_ledger', 'the downstream system holds a key the ledger lacks')], max_length=30)),
                ('run_id', models.CharField(blank=True, db_index=True, default='', max_length=64)),
                ('step_id', models.CharField(blank=True, default='', max_length=255)),
                ('tool', models.CharField(blank=True, default='', max_length=200)),
                ('effect_key', models.CharField(max_length=200)),
                ('ledger_status', models.CharField(blank=True, default='', max_length=20)),
                ('ledger_result', models.JSONField(blank=True, null=True)),
                ('downstream', models.JSONField(blank=True, null=True)),
                ('audit', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='findings', to='ledger.effectaudit')),
            ],
            options={
                'ordering': ['id'],
            },
        ),
    ]
