from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0007_session_context_window'),
    ]

    operations = [
        migrations.AddField(model_name='message', name='version_of', field=models.PositiveIntegerField(default=0)),
        migrations.AddField(model_name='message', name='answer_of', field=models.PositiveIntegerField(default=0)),
        migrations.AddField(model_name='message', name='selected', field=models.BooleanField(default=True)),
        migrations.AddField(model_name='message', name='parked_by', field=models.PositiveIntegerField(default=0)),
        migrations.AddField(model_name='message', name='parked_display', field=models.BooleanField(default=False)),
        migrations.AddField(model_name='message', name='parked_context', field=models.BooleanField(default=False)),
    ]
