"""The JSON payload columns of PredictionSample become nullable, ahead of 0031 dropping them.

The code of this release no longer writes them; an install whose 0031 refused (samples still in
the JSON columns) runs on this schema while ``samples_to_columnar`` moves them.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def empty_payloads_fill(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Reversed: rows written without features (by this release) get {} before NOT NULL is back."""
    samples = apps.get_model("monitoring", "PredictionSample").objects.using(schema_editor.connection.alias)
    samples.filter(features__isnull=True).update(features={})


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0029_check_slices"),
    ]

    operations = [
        migrations.AlterField(
            model_name="predictionsample",
            name="features",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(migrations.RunPython.noop, empty_payloads_fill, elidable=False),
    ]
