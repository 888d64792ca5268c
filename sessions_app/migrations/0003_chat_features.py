"""Chat features of issue #11: message meta (history redraw), title_source, per-user settings,
and the full-text index of chats (FTS5 + triggers on SQLite, a GIN index on PostgreSQL)."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models



def search_index_forwards(apps, schema_editor):
    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        from sessions_app.search import ensure_search_index

        ensure_search_index(conn)
    elif conn.vendor == "postgresql":
        from django.contrib.postgres.indexes import GinIndex
        from django.contrib.postgres.search import SearchVector

        # The very expression sessions_app.search queries with, so the planner uses the index.
        Message = apps.get_model("sessions_app", "Message")
        schema_editor.add_index(Message, GinIndex(SearchVector("content", config="simple"), name="message_content_fts"))


def search_index_backwards(apps, schema_editor):
    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        from sessions_app.search import drop_search_index

        drop_search_index(conn)
    elif conn.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS message_content_fts")


def titles_already_there(apps, schema_editor):
    """Titles of existing chats may be the owner's: never replace them with generated ones."""
    Session = apps.get_model("sessions_app", "Session")
    Session.objects.exclude(title="").update(title_source="user")


class Migration(migrations.Migration):

    dependencies = [
        ('agent', '0003_tool_policy_and_audit'),
        ('sessions_app', '0002_login_attempt'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='meta',
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name='session',
            name='title_source',
            field=models.CharField(blank=True, default='', max_length=8),
        ),
        migrations.CreateModel(
            name='UserSettings',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('theme', models.CharField(choices=[('system', 'System'), ('light', 'Light'), ('dark', 'Dark')], default='system', max_length=8)),
                ('notify_when_done', models.BooleanField(default=False, help_text='Notify when an answer finishes.')),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('default_profile', models.ForeignKey(blank=True, help_text='Profile of new chats (empty: secretary).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='agent.profile')),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='navi_settings', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'user settings',
            },
        ),
        migrations.RunPython(titles_already_there, migrations.RunPython.noop),
        migrations.RunPython(search_index_forwards, search_index_backwards),
    ]
