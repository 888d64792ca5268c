"""Passages found by their words: SQLite FTS5 (bm25), PostgreSQL full text (ts_rank).

The FTS5 table is an external-content index of knowledge_app_passage's text and section (its
heading path: a passage is found by its sections' names too) kept in sync by triggers; on
PostgreSQL a stored `tsv` column (`to_tsvector('english', section || ' ' || text)`) with a GIN
index (migrations 0001, 0005).
Terms are OR-ed, each quoted: the query's syntax is never interpreted.

Bounded cost: ranking costs per matching passage, and a common word matches most of them
(100 ms at 100 000 passages). So the terms are taken rarest first while their matches add up
to at most `BUDGET` (the rarest always; how many each matches: `_counts`); the common ones
left out weigh least in bm25 anyway (its idf is near zero for a word in most passages). When
even the rarest matches more, every term is used but only the newest `BUDGET` passages
matching any are ranked (anyone's newest: finding the owner's would walk every match again).
"""

from __future__ import annotations

import logging
from contextlib import nullcontext

from django.db import connection, connections, transaction

from navi_project.fulltext import fts5_match, install_missing_triggers, pg_tsquery, query_terms

log = logging.getLogger(__name__)
FTS_TABLE = "knowledge_app_passage_fts"
PASSAGE_TABLE = "knowledge_app_passage"
DOCUMENT_TABLE = "knowledge_app_document"
_TRIGGERS = {
    "passage_fts_ai": f"""CREATE TRIGGER IF NOT EXISTS passage_fts_ai AFTER INSERT ON {PASSAGE_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}(rowid, text, section) VALUES (new.id, new.text, new.section);
    END""",
    "passage_fts_ad": f"""CREATE TRIGGER IF NOT EXISTS passage_fts_ad AFTER DELETE ON {PASSAGE_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text, section) VALUES ('delete', old.id, old.text, old.section);
    END""",
    "passage_fts_au": f"""CREATE TRIGGER IF NOT EXISTS passage_fts_au AFTER UPDATE OF text, section ON {PASSAGE_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, text, section) VALUES ('delete', old.id, old.text, old.section);
        INSERT INTO {FTS_TABLE}(rowid, text, section) VALUES (new.id, new.text, new.section);
    END""",
}
MAX_TERMS = 32
# Matching passages ranked at most: ranking costs ~1 µs a passage on SQLite, ~6 on PostgreSQL.
BUDGET = {"sqlite": 2000, "postgresql": 1000}
PG_DOCUMENT = "p.tsv"  # a stored generated column: to_tsvector('english', section || ' ' || text)


def ensure_fts(conn=connection) -> None:
    """Create the FTS5 table and triggers if missing (idempotent), rebuilding a lost index."""
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cur:
        cur.execute(f"SELECT 1 FROM pragma_table_info('{PASSAGE_TABLE}') WHERE name = 'section'")
        if cur.fetchone() is None:
            return  # migrating, before 0005 gave passages their section: that migration makes the index
        cur.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(text, section, content='{PASSAGE_TABLE}', "
            "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')"
        )
        if install_missing_triggers(cur, [PASSAGE_TABLE], _TRIGGERS):
            cur.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")


def ensure_fts_after_migrate(sender, using="default", **kwargs) -> None:
    ensure_fts(connections[using])


ANALYZE_AFTER = 1000  # passages added at once after which PostgreSQL's statistics are refreshed


def added(count: int) -> None:
    """A document's `count` passages were written: on PostgreSQL, after a big one, refresh the
    statistics now, not when autovacuum next looks (`_counts` and the planner read them)."""
    if connection.vendor != "postgresql" or count < ANALYZE_AFTER:
        return
    try:
        with connection.cursor() as cur:
            cur.execute(f"ANALYZE {PASSAGE_TABLE}")
    except Exception as exc:  # noqa: BLE001 - not the table's owner: autovacuum will do it
        log.info("ANALYZE %s skipped: %s", PASSAGE_TABLE, exc)


def ranked(owner_id: int, query: str, limit: int) -> list[tuple[int, float]]:
    """The owner's passages (of ready documents) matching any word, best first: (id, score)."""
    # Whole words, not prefixes as for facts and chats: the index stems them (porter).
    words = query_terms(query, MAX_TERMS)
    if not words or limit <= 0:
        return []
    words, oldest = _within_budget(words)
    if not words:
        return []
    newest_only = " AND p.id >= %s" if oldest is not None else ""
    extra = [oldest] if oldest is not None else []
    if connection.vendor == "sqlite":
        sql = (
            f"SELECT p.id, bm25({FTS_TABLE}) AS r FROM {FTS_TABLE} CROSS JOIN {PASSAGE_TABLE} p ON p.id = {FTS_TABLE}.rowid "
            f"JOIN {DOCUMENT_TABLE} d ON d.id = p.document_id "
            f"WHERE {FTS_TABLE} MATCH %s AND p.owner_id = %s AND d.status = 'ready'"
            f"{newest_only.replace('p.id', f'{FTS_TABLE}.rowid')} ORDER BY r LIMIT %s"
        )
        params = [fts5_match(words), owner_id, *extra, limit]
    else:
        # ts_rank has no inverse document frequency: a passage repeating a common word would
        # beat the one with the rare name or number. How many of the query's words a passage
        # has comes first, ts_rank after.
        coverage = " + ".join([f"({PG_DOCUMENT} @@ plainto_tsquery('english', %s))::int"] * len(words))
        sql = (
            f"SELECT p.id, {coverage} + ts_rank({PG_DOCUMENT}, q) AS r FROM {PASSAGE_TABLE} p "
            f"JOIN {DOCUMENT_TABLE} d ON d.id = p.document_id, to_tsquery('english', %s) q "
            f"WHERE {PG_DOCUMENT} @@ q AND p.owner_id = %s AND d.status = 'ready'{newest_only} ORDER BY r DESC LIMIT %s"
        )
        params = [*words, pg_tsquery(words), owner_id, *extra, limit]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return [(int(i), -float(r) if connection.vendor == "sqlite" else float(r)) for i, r in cur.fetchall()]


def _within_budget(words: list[str]) -> tuple[list[str], int | None]:
    """The terms to rank by (rarest first, their matches within the budget) and, when the
    rarest alone matches more, all of them and the id where their newest matches start."""
    budget = BUDGET[connection.vendor]
    counts = _counts(words, budget)
    words = [t for t in words if counts[t]]  # a term matching nothing (on PostgreSQL: a stop word) adds nothing
    chosen, total = [], 0
    for term in sorted(words, key=lambda t: counts[t]):
        if chosen and total + counts[term] > budget:
            break
        chosen.append(term)
        total += counts[term]
    if total <= budget:
        return chosen, None
    chosen = words
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s ORDER BY rowid DESC LIMIT 1 OFFSET %s",
                        [fts5_match(chosen), budget - 1])
        else:
            cur.execute(f"SELECT p.id FROM {PASSAGE_TABLE} p WHERE {PG_DOCUMENT} @@ to_tsquery('english', %s) "
                        "ORDER BY p.id DESC LIMIT 1 OFFSET %s", [pg_tsquery(chosen), budget - 1])
        row = cur.fetchone()
    return chosen, (int(row[0]) if row else None)


def _counts(words: list[str], budget: int) -> dict[str, int]:
    """How many passages (anyone's) contain each term (0: a stop word), counted up to budget + 1
    or, on PostgreSQL once analyzed, estimated from ANALYZE's most common lexemes."""
    if connection.vendor == "postgresql":
        # Counting there fetches each matching row (~50 ms for a common word at 100 000
        # passages); the statistics are read at once. A term not among the most common is
        # rarer than the rarest that is: 1.
        with connection.cursor() as cur:
            cur.execute(
                "WITH common AS (SELECT unnest(most_common_elems::text::text[]) AS lexeme, "
                "unnest(most_common_elem_freqs) AS freq FROM pg_stats "
                "WHERE schemaname = current_schema() AND tablename = %s AND attname = 'tsv'), "
                # rows now, as the planner reckons them: the density ANALYZE saw times the pages now
                "total AS (SELECT CASE WHEN relpages > 0 THEN reltuples / relpages * "
                "(pg_relation_size(oid) / current_setting('block_size')::int) ELSE 0 END AS n "
                "FROM pg_class WHERE oid = %s::regclass) "
                "SELECT t.term, (SELECT count(*) FROM unnest(to_tsvector('english', t.term))), "
                "(SELECT max(c.freq) FROM unnest(to_tsvector('english', t.term)) l JOIN common c ON c.lexeme = l.lexeme) "
                "* (SELECT n FROM total), EXISTS (SELECT 1 FROM common) FROM unnest(%s::text[]) AS t(term)",
                [PASSAGE_TABLE, PASSAGE_TABLE, words],
            )
            rows = cur.fetchall()
            if rows and rows[0][3]:
                return {term: 0 if not lexemes else max(1, int(estimate or 0)) for term, lexemes, estimate, _ in rows}
    found = {}
    with transaction.atomic() if connection.vendor == "postgresql" else nullcontext(), connection.cursor() as cur:
        if connection.vendor == "postgresql":
            # Not analyzed yet (a table just filled): counted through the GIN index — without
            # statistics the planner may scan every passage for a rare word (50 ms at 10 000).
            cur.execute("SET LOCAL enable_seqscan = off")
        for term in words:
            if connection.vendor == "sqlite":
                cur.execute(f"SELECT count(*) FROM (SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s LIMIT %s)",
                            [fts5_match([term]), budget + 1])
            else:
                cur.execute(f"SELECT count(*) FROM (SELECT 1 FROM {PASSAGE_TABLE} p "
                            f"WHERE {PG_DOCUMENT} @@ plainto_tsquery('english', %s) LIMIT %s) m", [term, budget + 1])
            found[term] = int(cur.fetchone()[0])
    return found
