"""Run titles and labels, and notifications: Run.title and Run.labels (what a run is about, made
from its inputs when it starts) and ``ledger_notification``, the notification outbox.

On PostgreSQL the title gets a trigram index (``pg_trgm``) so that a search for any part of it
stays an index scan at 100k+ runs, and the labels a GIN index for ``key:value`` containment.
Where ``pg_trgm`` cannot be created (no privilege) the title search still works, by scanning.
Other databases get neither index.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def _indexes(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "CREATE INDEX run_labels_gin ON ledger_run USING gin (labels jsonb_path_ops)"
    )
    try:
        with schema_editor.connection.cursor() as cursor, _savepoint(schema_editor):
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except Exception:  # noqa: BLE001 - no privilege: the search scans instead
        return
    schema_editor.execute(
        "CREATE INDEX run_title_trgm ON ledger_run USING gin (UPPER(title) gin_trgm_ops)"
    )


def _savepoint(schema_editor: Any) -> Any:
    from django.db import transaction

    return transaction.atomic(using=schema_editor.connection.alias)


def _drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS run_title_trgm")
        schema_editor.execute("DROP INDEX IF EXISTS run_labels_gin")


class Migration(migrations.Migration):
    replaces = [
        ("ledger", "0006_op10_titles_clean_notifications"),
    ]

    dependencies = [("ledger", "0005_lean_step_indexes")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="title",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="run",
            name="labels",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(_indexes, _drop),
        migrations.CreateModel(
            name='Notification',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('event_key', models.CharField(max_length=200)),
                ('channel', models.CharField(max_length=50)),
                ('kind', models.CharField(choices=[('needs_attention', 'a run needs a person'), ('approval_waiting', 'a settlement waits for approval'), ('reminder', 'still waiting')], max_length=30)),
                ('run_id', models.CharField(db_index=True, max_length=64)),
                ('settlement_id', models.BigIntegerField(blank=True, null=True)),
                ('waiting_since', models.DateTimeField(blank=True, null=True)),
                ('subject', models.CharField(max_length=300)),
                ('payload', models.JSONField(default=dict)),
                ('idempotency_key', models.CharField(max_length=64, unique=True)),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('sending', 'Sending'), ('sent', 'Sent'), ('failed', 'Failed')], default='pending', max_length=20)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('next_attempt_at', models.DateTimeField()),
                ('claimed_until', models.DateTimeField(blank=True, null=True)),
                ('claim_token', models.CharField(blank=True, default='', max_length=64)),
                ('last_error', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField()),
                ('sent_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'indexes': [models.Index(fields=['status', 'next_attempt_at'], name='notification_due'), models.Index(fields=['created_at', 'id'], name='notification_created')],
                'constraints': [models.UniqueConstraint(fields=('event_key', 'channel'), name='notification_once')],
            },
        ),
    ]
