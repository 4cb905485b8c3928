"""Settlement.step (the ledger row) becomes step_row, and step_id_text becomes step_id: on every
other model ``step_id`` is a step's id as text, and so it is here now."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("ledger", "0004_audit_run_start")]

    operations = [
        migrations.RemoveIndex(model_name="settlement", name="settlement_step_status"),
        migrations.RenameField("settlement", "step", "step_row"),
        migrations.RenameField("settlement", "step_id_text", "step_id"),
        migrations.AlterField(
            model_name="settlement", name="step_id", field=models.CharField(max_length=255)
        ),
        migrations.AddIndex(
            model_name="settlement",
            index=models.Index(fields=["step_row", "status"], name="settlement_step_status"),
        ),
    ]
