"""The full-text index (SQLite) no longer holds an answer while it streams: its row is indexed
once complete or interrupted, not re-indexed at every partial save (sessions_app.search)."""

from django.db import migrations


def forwards(apps, schema_editor):
    from sessions_app.search import reinstall_message_triggers

    reinstall_message_triggers(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0003_chat_features"),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
