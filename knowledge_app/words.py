"""Passages found by their words: SQLite FTS5 (bm25), PostgreSQL full text (ts_rank).

The FTS5 table is an external-content index of knowledge_app_passage kept in sync by
triggers; on PostgreSQL a stored `tsv` column (`to_tsvector('english', text)`) with a GIN index
(migration 0001).
Terms are OR-ed, each quoted: the query's syntax is never interpreted.
"""

from __future__ import annotations

from django.db import connection, connections

from navi_project.fulltext import fts5_match, install_missing_triggers, pg_tsquery, query_terms

FTS_TABLE = "knowledge_app_passage_fts"
PASSAGE_TABLE = "knowledge_app_passage"
DOCUMENT_TABLE = "knowledge_app_document"
_TRIGGERS = {
    "passage_fts_ai": f"""CREATE TRIGGER IF NOT EXISTS passage_fts_ai AFTER INSERT ON {PASSAGE_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text);
    END""",
    "passage_fts_ad": f"""CREATE TRIGGER IF NOT EXISTS passage_fts_ad AFTER DELETE ON {PASSAGE_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
    "passage_fts_au": f"""CREATE TRIGGER IF NOT EXISTS passage_fts_au AFTER UPDATE OF text ON {PASSAGE_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO {FTS_TABLE}(rowid, text) VALUES (new.id, new.text);
    END""",
}
MAX_TERMS = 32
PG_DOCUMENT = "p.tsv"  # a stored generated column: to_tsvector('english', text)


def ensure_fts(conn=connection) -> None:
    """Create the FTS5 table and triggers if missing (idempotent), rebuilding a lost index."""
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(text, content='{PASSAGE_TABLE}', "
            "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')"
        )
        if install_missing_triggers(cur, [PASSAGE_TABLE], _TRIGGERS):
            cur.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")


def ensure_fts_after_migrate(sender, using="default", **kwargs) -> None:
    ensure_fts(connections[using])


def ranked(owner_id: int, query: str, limit: int) -> list[tuple[int, float]]:
    """The owner's passages (of ready documents) matching any word, best first: (id, score)."""
    # Whole words, not prefixes as for facts and chats: the index stems them (porter).
    words = query_terms(query, MAX_TERMS)
    if not words or limit <= 0:
        return []
    if connection.vendor == "sqlite":
        match = fts5_match(words)
        sql = (
            f"SELECT p.id, bm25({FTS_TABLE}) AS r FROM {FTS_TABLE} CROSS JOIN {PASSAGE_TABLE} p ON p.id = {FTS_TABLE}.rowid "
            f"JOIN {DOCUMENT_TABLE} d ON d.id = p.document_id "
            f"WHERE {FTS_TABLE} MATCH %s AND p.owner_id = %s AND d.status = 'ready' ORDER BY r LIMIT %s"
        )
        params = [match, owner_id, limit]
    else:
        # ts_rank has no inverse document frequency: a passage repeating a common word would
        # beat the one with the rare name or number. How many of the query's words a passage
        # has comes first, ts_rank after.
        tsquery = pg_tsquery(words)
        coverage = " + ".join([f"({PG_DOCUMENT} @@ plainto_tsquery('english', %s))::int"] * len(words))
        sql = (
            f"SELECT p.id, {coverage} + ts_rank({PG_DOCUMENT}, q) AS r FROM {PASSAGE_TABLE} p "
            f"JOIN {DOCUMENT_TABLE} d ON d.id = p.document_id, to_tsquery('english', %s) q "
            f"WHERE {PG_DOCUMENT} @@ q AND p.owner_id = %s AND d.status = 'ready' ORDER BY r DESC LIMIT %s"
        )
        params = [*words, tsquery, owner_id, limit]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return [(int(i), -float(r) if connection.vendor == "sqlite" else float(r)) for i, r in cur.fetchall()]
