from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0008_message_versions"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="model",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
    ]
