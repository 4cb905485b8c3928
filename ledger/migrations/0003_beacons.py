"""Beacons: ``ledger_beacon``, the last time a periodic duty ran (the recovery sweep), so that
the runs list can say whether recovery is alive."""

from django.db import migrations, models


class Migration(migrations.Migration):

    replaces = [
        ("ledger", "0003_beacon"),
    ]

    dependencies = [
        ("ledger", "0002_settlements_and_audit_events"),
    ]

    operations = [
        migrations.CreateModel(
            name='Beacon',
            fields=[
                ('name', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('at', models.DateTimeField()),
                ('detail', models.JSONField(blank=True, default=dict)),
            ],
        ),
    ]
