"""Full-text index of memory facts: an FTS5 table + sync triggers on SQLite, a GIN index on
Postgres (other databases fall back to LIKE search)."""

from django.db import migrations

PG_INDEX = (
    "CREATE INDEX IF NOT EXISTS memoryfact_fts_gin ON memory_app_memoryfact USING gin (("
    "setweight(to_tsvector('simple', category), 'B') || setweight(to_tsvector('simple', \"key\"), 'A')"
    " || setweight(to_tsvector('simple', value), 'C')))"
)


def forwards(apps, schema_editor):
    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        from memory_app.search import ensure_fts

        ensure_fts(conn)
    elif conn.vendor == "postgresql":
        schema_editor.execute(PG_INDEX)


def backwards(apps, schema_editor):
    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        from memory_app.search import drop_fts

        drop_fts(conn)
    elif conn.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS memoryfact_fts_gin")


class Migration(migrations.Migration):
    dependencies = [("memory_app", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
