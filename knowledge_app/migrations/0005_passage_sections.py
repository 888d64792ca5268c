"""Passages know their section (issue #54): `Passage.section` is indexed for words beside the
text, and `Document.splitter` says which splitter cut a document (older ones are split again by
a job, never here)."""

from django.db import migrations, models

TRIGGERS = ("passage_fts_ai", "passage_fts_ad", "passage_fts_au")


def index_sections(apps, schema_editor):
    """The words' index over text and section: FTS5 made again on SQLite, the stored tsvector on PostgreSQL."""
    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        from knowledge_app.words import ensure_fts

        for name in TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
        schema_editor.execute("DROP TABLE IF EXISTS knowledge_app_passage_fts")
        ensure_fts(conn)  # made with both columns and filled from the passages
    elif conn.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE knowledge_app_passage DROP COLUMN IF EXISTS tsv")
        schema_editor.execute(
            "ALTER TABLE knowledge_app_passage ADD COLUMN tsv tsvector "
            "GENERATED ALWAYS AS (to_tsvector('english', section || ' ' || text)) STORED"
        )
        schema_editor.execute("CREATE INDEX knowledge_passage_tsv ON knowledge_app_passage USING gin (tsv)")


def index_text_only(apps, schema_editor):
    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        for name in TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
        schema_editor.execute("DROP TABLE IF EXISTS knowledge_app_passage_fts")
        schema_editor.execute(
            "CREATE VIRTUAL TABLE knowledge_app_passage_fts USING fts5(text, content='knowledge_app_passage', "
            "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')")
        fts, passages = "knowledge_app_passage_fts", "knowledge_app_passage"
        schema_editor.execute(f"CREATE TRIGGER passage_fts_ai AFTER INSERT ON {passages} BEGIN "
                              f"INSERT INTO {fts}(rowid, text) VALUES (new.id, new.text); END")
        schema_editor.execute(f"CREATE TRIGGER passage_fts_ad AFTER DELETE ON {passages} BEGIN "
                              f"INSERT INTO {fts}({fts}, rowid, text) VALUES ('delete', old.id, old.text); END")
        schema_editor.execute(f"CREATE TRIGGER passage_fts_au AFTER UPDATE OF text ON {passages} BEGIN "
                              f"INSERT INTO {fts}({fts}, rowid, text) VALUES ('delete', old.id, old.text); "
                              f"INSERT INTO {fts}(rowid, text) VALUES (new.id, new.text); END")
        schema_editor.execute(f"INSERT INTO {fts}({fts}) VALUES ('rebuild')")
    elif conn.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE knowledge_app_passage DROP COLUMN IF EXISTS tsv")
        schema_editor.execute(
            "ALTER TABLE knowledge_app_passage ADD COLUMN tsv tsvector "
            "GENERATED ALWAYS AS (to_tsvector('english', text)) STORED"
        )
        schema_editor.execute("CREATE INDEX knowledge_passage_tsv ON knowledge_app_passage USING gin (tsv)")


class Migration(migrations.Migration):

    dependencies = [
        ('knowledge_app', '0004_document_jobs'),
    ]

    operations = [
        migrations.AddField(
            model_name='document',
            name='splitter',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='passage',
            name='section',
            field=models.TextField(blank=True, default=''),
        ),
        migrations.RunPython(index_sections, index_text_only),
    ]
