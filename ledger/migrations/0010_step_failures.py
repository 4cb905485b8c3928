"""Run.wake_at: a run released while a step's retry waits out its back-off is queued and not
claimable before then. (Each failed attempt's exception, message and traceback are kept in
``Step.errors``, which exists already: no column for them.)"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("ledger", "0009_run_prior_lease_expires_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="wake_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
