from typing import Any

from django.db import migrations, models


def empty_done_checks_skipped(apps: Any, schema_editor: Any) -> None:
    """Checks stored "done" over an empty window before the skipped state existed."""
    QualityCheck = apps.get_model("monitoring", "QualityCheck")
    QualityCheck.objects.filter(state="done", n_samples=0).update(
        state="skipped", skipped_reason="no predictions in this window"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0008_qualitycheck_owner"),
    ]

    operations = [
        migrations.AddField(
            model_name="qualitycheck",
            name="skipped_reason",
            field=models.TextField(blank=True, help_text="why the check measured nothing"),
        ),
        migrations.AlterField(
            model_name="qualitycheck",
            name="state",
            field=models.CharField(
                choices=[
                    ("running", "Running"),
                    ("done", "Done"),
                    ("failed", "Failed"),
                    ("skipped", "Skipped"),
                ],
                default="running",
                max_length=10,
            ),
        ),
        migrations.RunPython(empty_done_checks_skipped, migrations.RunPython.noop),
    ]
