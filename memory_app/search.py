"""Ranked full-text search over a user's facts: SQLite FTS5, Postgres full-text, else LIKE.

Query terms are OR-ed (any term matches), best matches first (bm25 / ts_rank). The FTS5 table
is an external-content index of memory_app_memoryfact kept in sync by triggers.

Bounded cost: terms of three letters or more match as prefixes ("pyth" finds "python"), shorter
ones only as whole words ("a" would match a quarter of everything). When a query matches more
than `MAX_RANKED` of the owner's facts (a category name, a very common word), only the
`MAX_RANKED` most recently added matches are ranked: ranking every one of 100 000 matches costs
hundreds of ms, and among that many the newest are the ones worth reading anyway.

By meaning too: an app above (knowledge_app) registers a function giving the fact ids nearest
in meaning (`register_meaning`); its list and the words' are fused by reciprocal rank, so
"coffee" finds "espresso" and an exact word still counts.
"""

from __future__ import annotations

import logging
from typing import Callable

from django.db import connection, connections
from django.db.models import Q

from navi_project.fulltext import fts5_match, install_missing_triggers, pg_tsquery, query_terms

from .models import MemoryFact

FTS_TABLE = "memory_app_memoryfact_fts"
FACT_TABLE = "memory_app_memoryfact"
_TRIGGERS = {
    "memoryfact_fts_ai": f"""CREATE TRIGGER IF NOT EXISTS memoryfact_fts_ai AFTER INSERT ON {FACT_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}(rowid, category, "key", value) VALUES (new.id, new.category, new."key", new.value);
    END""",
    "memoryfact_fts_ad": f"""CREATE TRIGGER IF NOT EXISTS memoryfact_fts_ad AFTER DELETE ON {FACT_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, category, "key", value)
        VALUES ('delete', old.id, old.category, old."key", old.value);
    END""",
    "memoryfact_fts_au": f"""CREATE TRIGGER IF NOT EXISTS memoryfact_fts_au AFTER UPDATE ON {FACT_TABLE} BEGIN
        INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, category, "key", value)
        VALUES ('delete', old.id, old.category, old."key", old.value);
        INSERT INTO {FTS_TABLE}(rowid, category, "key", value) VALUES (new.id, new.category, new."key", new.value);
    END""",
}
MAX_TERMS = 20
MIN_PREFIX = 3  # shorter terms match whole words only
MAX_RANKED = 1000  # matches ranked at most (the newest ones)
RRF_K = 60
# fn(owner_id, query, limit) -> fact ids nearest in meaning first (knowledge_app adds it).
MEANING: list[Callable[[int, str, int], list[int]]] = []
log = logging.getLogger(__name__)


def register_meaning(fn: Callable[[int, str, int], list[int]]) -> None:
    if fn not in MEANING:
        MEANING.append(fn)


def ensure_fts(conn=connection) -> None:
    """Create the FTS5 table and triggers if missing (idempotent); rebuild the index if the
    triggers had been lost (a table rebuild by a later migration drops them)."""
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
            f"category, \"key\", value, content='{FACT_TABLE}', content_rowid='id', "
            "tokenize='unicode61 remove_diacritics 2')"
        )
        if install_missing_triggers(cur, [FACT_TABLE], _TRIGGERS):
            cur.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")


def drop_fts(conn=connection) -> None:
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cur:
        for name in _TRIGGERS:
            cur.execute(f"DROP TRIGGER IF EXISTS {name}")
        cur.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")


def search_facts(owner_id: int, query: str, limit: int = 15) -> list[MemoryFact]:
    """The owner's facts matching any term of `query` or close to it in meaning, best first."""
    terms = query_terms(query, MAX_TERMS)
    if not terms or limit <= 0:
        return []
    by_words = _by_words(owner_id, terms, limit)
    by_meaning: list[int] = []
    for find in MEANING:
        try:
            by_meaning += find(owner_id, query, limit)
        except Exception:  # search by meaning is extra: the words' answer stands without it
            log.exception("search by meaning failed")
    if not by_meaning:
        return by_words
    scores: dict[int, float] = {}
    for ids in ([f.id for f in by_words], by_meaning):
        for rank, fact_id in enumerate(ids, start=1):
            scores[fact_id] = scores.get(fact_id, 0.0) + 1.0 / (RRF_K + rank)
    best = sorted(scores, key=lambda i: (-scores[i], -i))[:limit]
    by_id = {f.id: f for f in by_words}
    by_id.update(MemoryFact.objects.filter(owner_id=owner_id).in_bulk([i for i in best if i not in by_id]))
    return [by_id[i] for i in best if i in by_id]


def _by_words(owner_id: int, terms: list[str], limit: int) -> list[MemoryFact]:
    if connection.vendor == "sqlite":
        return _search_sqlite(owner_id, terms, limit)
    if connection.vendor == "postgresql":
        return _search_postgres(owner_id, terms, limit)
    return _search_like(owner_id, terms, limit)


def _search_sqlite(owner_id: int, terms: list[str], limit: int) -> list[MemoryFact]:
    # Each term quoted (no FTS syntax injection), long ones prefix-matched, OR-ed. CROSS JOIN
    # keeps the index lookup outside: SQLite would otherwise walk the owner's rows and probe the
    # index for each.
    match = fts5_match(terms, prefix_from=MIN_PREFIX)
    matches = f"FROM {FTS_TABLE} CROSS JOIN {FACT_TABLE} f ON f.id = {FTS_TABLE}.rowid WHERE {FTS_TABLE} MATCH %s AND f.owner_id = %s"
    with connection.cursor() as cur:
        cur.execute(f"SELECT f.id {matches} ORDER BY {FTS_TABLE}.rowid DESC LIMIT 1 OFFSET %s", [match, owner_id, MAX_RANKED - 1])
        oldest = cur.fetchone()  # the MAX_RANKED-th newest match, if there are that many
        newest_only = f" AND {FTS_TABLE}.rowid >= %s" if oldest else ""
        cur.execute(
            f"SELECT f.id {matches}{newest_only} ORDER BY bm25({FTS_TABLE}, 2.0, 3.0, 1.0), f.updated_at DESC LIMIT %s",
            [match, owner_id, *([oldest[0]] if oldest else []), limit],
        )
        ids = [row[0] for row in cur.fetchall()]
    return _in_order(ids)


def _search_postgres(owner_id: int, terms: list[str], limit: int) -> list[MemoryFact]:
    tsquery = pg_tsquery(terms, prefix_from=MIN_PREFIX)
    document = (
        "setweight(to_tsvector('simple', category), 'B') || setweight(to_tsvector('simple', \"key\"), 'A')"
        " || setweight(to_tsvector('simple', value), 'C')"
    )
    sql = (
        f"SELECT id FROM (SELECT id, updated_at, {document} AS document FROM {FACT_TABLE} "
        f"WHERE owner_id = %s AND ({document}) @@ to_tsquery('simple', %s) ORDER BY id DESC LIMIT %s) newest "
        "ORDER BY ts_rank(document, to_tsquery('simple', %s)) DESC, updated_at DESC LIMIT %s"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [owner_id, tsquery, MAX_RANKED, tsquery, limit])
        ids = [row[0] for row in cur.fetchall()]
    return _in_order(ids)


def _search_like(owner_id: int, terms: list[str], limit: int) -> list[MemoryFact]:
    """Fallback for other databases: OR of substring matches, ranked by how many terms hit."""
    cond = Q()
    for t in terms:
        cond |= Q(category__icontains=t) | Q(key__icontains=t) | Q(value__icontains=t)
    rows = list(MemoryFact.objects.filter(cond, owner_id=owner_id)[:500])

    def score(f: MemoryFact) -> int:
        text = f"{f.category} {f.key} {f.value}".lower()
        return sum(text.count(t) for t in terms)

    return sorted(rows, key=lambda f: (-score(f), -f.updated_at.timestamp()))[:limit]


def _in_order(ids: list[int]) -> list[MemoryFact]:
    by_id = MemoryFact.objects.in_bulk(ids)
    return [by_id[i] for i in ids if i in by_id]


def ensure_fts_after_migrate(sender, using="default", **kwargs) -> None:
    """post_migrate receiver: a migration that rebuilds the table (SQLite) drops the triggers."""
    ensure_fts(connections[using])
