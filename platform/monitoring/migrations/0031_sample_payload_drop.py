"""Drop the JSON payload columns of PredictionSample (the store before the columnar one).

Refused, with nothing dropped, while any sample is still held only there (an index row without a
part): ``python manage.py samples_to_columnar`` moves them, then ``migrate`` again drops the
columns. Reversed, the columns come back empty.
"""

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps
from django.db.models import Count


class SamplesNotMoved(Exception):
    """Samples are still held only in the JSON columns this migration drops."""


def unmoved_refuse(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    samples = apps.get_model("monitoring", "PredictionSample").objects.using(schema_editor.connection.alias)
    unmoved = samples.filter(part__isnull=True)
    if unmoved.exists():
        by_model = unmoved.values_list("model__name").annotate(n=Count("id")).order_by("model__name")
        raise SamplesNotMoved(
            f"samples are still stored as JSON rows only ({', '.join(f'{m}: {n}' for m, n in by_model)}); "
            "this migration would drop them. Run `python manage.py samples_to_columnar` to move them "
            "into the columnar store, then `python manage.py migrate` again."
        )


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0030_sample_payload_nullable"),
    ]

    operations: list[Any] = [
        migrations.RunPython(unmoved_refuse, migrations.RunPython.noop, elidable=False),
        migrations.RemoveField(model_name="predictionsample", name="features"),
        migrations.RemoveField(model_name="predictionsample", name="probabilities"),
    ]
