"""A chat's first title (set with its first message) no longer reads every indexed title: the
title index (SQLite FTS5) cannot be searched by session, so its triggers only delete when there
was a title to delete (sessions_app.search)."""

from django.db import migrations


def forwards(apps, schema_editor):
    from sessions_app.search import reinstall_session_triggers

    reinstall_session_triggers(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0004_search_skips_streaming_rows"),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
