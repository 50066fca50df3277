from django.db import migrations, models

# Every stored label takes its prediction's timestamp where the prediction is in (one statement,
# on the unique (model, sample id) index; the same text on PostgreSQL and SQLite); the others
# stay waiting, as a label that comes before its prediction does.
BACKFILL = """
UPDATE monitoring_groundtruth SET sample_at = (
    SELECT s.timestamp FROM monitoring_predictionsample s
     WHERE s.model_id = monitoring_groundtruth.model_id AND s.sample_id = monitoring_groundtruth.sample_id
)
WHERE sample_at IS NULL
"""


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0023_backlog_known_at_error"),
    ]

    operations = [
        migrations.AddField(
            model_name="groundtruth",
            name="sample_at",
            field=models.DateTimeField(blank=True, help_text="its prediction's timestamp", null=True),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.AddIndex(
            model_name="groundtruth",
            index=models.Index(fields=["model", "sample_at"], name="label_model_sample_at"),
        ),
        migrations.AddIndex(
            model_name="groundtruth",
            index=models.Index(
                condition=models.Q(("sample_at__isnull", True)), fields=["model"], name="label_waiting"
            ),
        ),
    ]
