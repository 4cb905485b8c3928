# Alert incidents and their pages, runs' stop causes (the incidents page), pauses' expiry.


import django.db.models.deletion
from django.db import migrations, models

BATCH = 2000


def signatures(apps, schema_editor):
    """The cause columns of the runs stopped before this migration (blocked or failed), with
    ``ledger.signatures`` as it is when the migration runs. The failed runs' step is unknown
    here (the engine records it from now on)."""
    from ledger.signatures import signature_of

    Run = apps.get_model("ledger", "Run")
    stopped = Run.objects.filter(status__in=("needs_attention", "failed")).order_by("run_id")
    last = ""
    while True:
        rows = list(
            stopped.filter(run_id__gt=last).values_list(
                "run_id", "status", "blocked_step_id", "detail", "error"
            )[:BATCH]
        )
        if not rows:
            return
        for run_id, status, step, detail, error in rows:
            blocked = status == "needs_attention"
            Run.objects.filter(pk=run_id).update(
                cause_step=(step if blocked else "")[:255],
                signature=signature_of(detail if blocked else error),
            )
        last = rows[-1][0]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0026_ratelimits"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="cause_step",
            field=models.CharField(blank=True, db_default="", default="", max_length=255),
        ),
        migrations.AddField(
            model_name="run",
            name="signature",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.RunPython(signatures, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status__in", ("needs_attention", "failed"))),
                fields=["status", "status_changed_at"],
                include=["agent", "cause_step", "reason", "signature"],
                name="run_incident",
            ),
        ),
        migrations.AddField(
            model_name="pause",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="Alert",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("rule", models.CharField(max_length=100)),
                ("scope", models.CharField(blank=True, default="", max_length=200)),
                ("dedup_key", models.CharField(max_length=300)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("triggered", "Triggered"),
                            ("acknowledged", "Acknowledged"),
                            ("resolved", "Resolved"),
                        ],
                        default="triggered",
                        max_length=20,
                    ),
                ),
                ("summary", models.CharField(max_length=300)),
                ("detail", models.JSONField(blank=True, default=dict)),
                ("opened_at", models.DateTimeField()),
                (
                    "seen_at",
                    models.DateTimeField(help_text="The last evaluation that found the condition."),
                ),
                ("acked_by", models.CharField(blank=True, default="", max_length=150)),
                ("acked_at", models.DateTimeField(blank=True, null=True)),
                ("resolved_at", models.DateTimeField(blank=True, null=True)),
                ("version", models.PositiveIntegerField(default=1)),
            ],
            options={
                "ordering": ["-opened_at", "-id"],
                "indexes": [models.Index(fields=["status", "opened_at"], name="alert_status_age")],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("status", "resolved"), _negated=True),
                        fields=("rule", "scope"),
                        name="alert_open_once",
                    )
                ],
            },
        ),
        migrations.AddField(
            model_name="notification",
            name="alert",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="deliveries",
                to="ledger.alert",
            ),
        ),
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
                    ("pause", "Pause"),
                    ("unpause", "Unpause"),
                    ("run_archive", "Run Archive"),
                    ("webhook_subscribe", "Webhook Subscribe"),
                    ("webhook_unsubscribe", "Webhook Unsubscribe"),
                    ("gate_approve", "Gate Approve"),
                    ("gate_reject", "Gate Reject"),
                    ("alert_ack", "Alert Ack"),
                    ("run_take", "Run Take"),
                    ("run_release", "Run Release"),
                    ("run_note", "Run Note"),
                    ("question_answer", "Question Answer"),
                ],
                db_index=True,
                max_length=40,
            ),
        ),
        migrations.AlterField(
            model_name="notification",
            name="kind",
            field=models.CharField(
                choices=[
                    ("needs_attention", "a run needs a person"),
                    ("approval_waiting", "a settlement waits for approval"),
                    ("reminder", "still waiting"),
                    ("run.succeeded", "event: run succeeded"),
                    ("run.failed", "event: run failed"),
                    ("run.cancelled", "event: run cancelled"),
                    ("run.needs_attention", "event: run needs attention"),
                    ("gate_waiting", "an effect waits for approval"),
                    ("alert.trigger", "alert: triggered"),
                    ("alert.acknowledge", "alert: acknowledged"),
                    ("alert.resolve", "alert: resolved"),
                ],
                max_length=30,
            ),
        ),
    ]
