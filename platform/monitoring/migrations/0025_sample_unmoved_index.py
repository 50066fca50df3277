from django.db import migrations, models

# The columnar store (the default from here on) refuses a window holding samples still in the
# relational store; this partial index finds them without touching moved rows (empty once
# samples_to_columnar has run, or on an install that began columnar).


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0024_label_sample_at"),
        ("registry", "0003_alter_registeredmodel_name"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="predictionsample",
            index=models.Index(
                condition=models.Q(("part__isnull", True)), fields=["model", "timestamp"], name="sample_unmoved"
            ),
        ),
    ]
