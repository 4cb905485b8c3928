"""Run.prior_lease_expires_at: the expiry of the last lease taken from a holder that may still be
alive, so that the next holder waits before touching that run's effects."""

from django.db import migrations, models


class Migration(migrations.Migration):

    replaces = [
        ("ledger", "0010_run_prior_lease_expires_at"),
    ]

    dependencies = [
        ("ledger", "0008_run_archives"),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='prior_lease_expires_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
