"""Claude Agent SDK session transcripts beside the ledger (ledger.adapters.claude_agent_sdk)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0015_run_idempotency_key"),
    ]

    operations = [
        migrations.CreateModel(
            name="ClaudeSessionEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("project_key", models.CharField(max_length=255)),
                ("session_id", models.CharField(max_length=255)),
                ("subpath", models.CharField(blank=True, default="", max_length=255)),
                ("uuid", models.CharField(blank=True, default="", max_length=64)),
                ("entry", models.JSONField()),
                ("created_at", models.DateTimeField()),
                (
                    "run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="claude_entries",
                        to="ledger.run",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["project_key", "session_id", "subpath", "id"], name="claude_key"
                    ),
                    models.Index(fields=["run", "id"], name="claude_run"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("uuid", ""), _negated=True),
                        fields=("project_key", "session_id", "subpath", "uuid"),
                        name="claude_entry_once",
                    )
                ],
            },
        ),
    ]
