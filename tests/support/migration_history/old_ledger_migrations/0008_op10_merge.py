"""Joins op10's migration (titles, clean runs, notifications) with agent13's and prod11's; the
audit action choices then hold both run_clean and run_archive (no SQL: choices only)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0006_op10_titles_clean_notifications"),
        ("ledger", "0007_merge_agent13_prod11"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("settlement_propose", "Settlement Propose"),
                    ("settlement_approve", "Settlement Approve"),
                    ("settlement_reject", "Settlement Reject"),
                    ("settlement_apply", "Settlement Apply"),
                    ("reconcile_lookup", "Reconcile Lookup"),
                    ("run_start", "Run Start"),
                    ("stale_accept", "Stale Accept"),
                    ("reexecute_from", "Reexecute From"),
                    ("run_resume", "Run Resume"),
                    ("run_retry", "Run Retry"),
                    ("run_cancel", "Run Cancel"),
                    ("run_fork", "Run Fork"),
                    ("run_clean", "Run Clean"),
                    ("step_admin_edit", "Step Admin Edit"),
                    ("run_admin_edit", "Run Admin Edit"),
                    ("run_archive", "Run Archive"),
                ],
                db_index=True,
                max_length=40,
            ),
        ),
    ]
