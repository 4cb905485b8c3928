# LangGraph checkpoints beside the run's ledger (ledger.adapters.langgraph.RunledgerSaver).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0028_schedules'),
    ]

    operations = [
        migrations.CreateModel(
            name='GraphBlob',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=255)),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('channel', models.CharField(max_length=255)),
                ('version', models.CharField(max_length=64)),
                ('type', models.CharField(max_length=32)),
                ('blob', models.BinaryField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('thread_id', 'checkpoint_ns', 'channel', 'version'), name='graph_blob_key')],
            },
        ),
        migrations.CreateModel(
            name='GraphWrite',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=255)),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('checkpoint_id', models.CharField(max_length=64)),
                ('task_id', models.CharField(max_length=255)),
                ('task_path', models.CharField(blank=True, default='', max_length=255)),
                ('idx', models.IntegerField()),
                ('channel', models.CharField(max_length=255)),
                ('type', models.CharField(max_length=32)),
                ('blob', models.BinaryField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('thread_id', 'checkpoint_ns', 'checkpoint_id', 'task_id', 'idx'), name='graph_write_key')],
            },
        ),
        migrations.CreateModel(
            name='GraphCheckpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('thread_id', models.CharField(max_length=255)),
                ('checkpoint_ns', models.CharField(blank=True, default='', max_length=255)),
                ('checkpoint_id', models.CharField(max_length=64)),
                ('parent_checkpoint_id', models.CharField(blank=True, default='', max_length=64)),
                ('type', models.CharField(max_length=32)),
                ('checkpoint', models.BinaryField()),
                ('metadata', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField()),
                ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='graph_checkpoints', to='ledger.run')),
            ],
            options={
                'indexes': [models.Index(fields=['run', 'id'], name='graph_checkpoint_run')],
                'constraints': [models.UniqueConstraint(fields=('thread_id', 'checkpoint_ns', 'checkpoint_id'), name='graph_checkpoint_key')],
            },
        ),
    ]
