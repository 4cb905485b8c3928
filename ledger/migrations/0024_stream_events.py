# The run's stream: what agents emit (ctx.emit), appended once per emitting step.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0023_run_mailbox'),
    ]

    operations = [
        migrations.CreateModel(
            name='StreamEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('step_id', models.CharField(max_length=255)),
                ('kind', models.CharField(max_length=100)),
                ('data', models.JSONField(null=True)),
                ('created_at', models.DateTimeField()),
                ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='stream_events', to='ledger.run')),
            ],
            options={
                'indexes': [models.Index(fields=['run', 'id'], name='stream_run_id')],
                'constraints': [models.UniqueConstraint(fields=('run', 'step_id'), name='stream_event_once')],
            },
        ),
    ]
