"""Run archives: ``ledger_runarchive``, where retention (``manage.py prune_runs``) put a finished
run's step rows.

It also stands for the four merge migrations of the old history, which had no operations but
audit-action choices (the current ones are 0002's).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    replaces = [
        ("ledger", "0006_prod11_run_archive"),
        ("ledger", "0007_merge_agent13_prod11"),
        ("ledger", "0008_merge_perf12"),
        ("ledger", "0008_op10_merge"),
        ("ledger", "0009_merge_op10_perf12"),
    ]

    dependencies = [
        ("ledger", "0007_effect_audits"),
    ]

    operations = [
        migrations.CreateModel(
            name='RunArchive',
            fields=[
                ('run', models.OneToOneField(db_column='run_id', on_delete=django.db.models.deletion.PROTECT, primary_key=True, related_name='archive', serialize=False, to='ledger.run')),
                ('location', models.CharField(max_length=1000)),
                ('sha256', models.CharField(max_length=64)),
                ('steps', models.PositiveIntegerField()),
                ('deleted', models.PositiveIntegerField(default=0)),
                ('kept', models.PositiveIntegerField(default=0)),
                ('run_version', models.PositiveIntegerField()),
                ('archived_at', models.DateTimeField()),
                ('archived_by', models.CharField(max_length=150)),
            ],
        ),
    ]
