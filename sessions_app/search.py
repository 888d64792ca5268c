"""Full-text search over a user's chats (`GET /sessions?q=`): titles and displayed messages.

SQLite: two FTS5 tables kept in sync by triggers — message text (only in_display user and
assistant rows, rowid = message id; not an answer while it streams: a `partial` row is indexed
once it is complete or interrupted, instead of again at every save of a growing answer, ~0.5 ms
each) and session titles. PostgreSQL: full-text search with a
GIN index on the message text (migration 0002), snippets cut in Python. Other databases: LIKE. Every term is reduced to
its word characters and quoted, so FTS syntax in the query (`"`, `*`, `NEAR(`) is plain text.

A snippet is HTML: everything escaped, the matches wrapped in <mark>…</mark>.
"""

from __future__ import annotations

import html
import re
import uuid
from dataclasses import dataclass

from django.db import connection, connections
from django.db.models import Q

from navi_project.fulltext import fts5_match, install_missing_triggers, is_prefix, pg_tsquery, query_terms

from .models import Message, Session

MESSAGE_FTS = "sessions_app_message_fts"
TITLE_FTS = "sessions_app_session_fts"
MESSAGE_TABLE = "sessions_app_message"
SESSION_TABLE = "sessions_app_session"
MAX_TERMS = 12
# Words of 3+ characters are prefix-matched ("dock" finds "docker"); shorter ones would expand to
# half the vocabulary.
MIN_PREFIX = 3
MAX_RESULTS = 50
TITLE_WEIGHT = 3.0  # a title match counts three times a message match
# Match markers: private-use characters, replaced by <mark> tags after escaping.
_START, _STOP = "\ue000", "\ue001"
_INDEXED = "new.in_display AND new.role IN ('user', 'assistant') AND new.content != '' AND new.status != 'partial'"

_TRIGGERS = {
    "message_fts_ai": f"""CREATE TRIGGER IF NOT EXISTS message_fts_ai AFTER INSERT ON {MESSAGE_TABLE}
        WHEN {_INDEXED} BEGIN
        INSERT INTO {MESSAGE_FTS}(rowid, content, session_id) VALUES (new.id, new.content, new.session_id);
    END""",
    "message_fts_ad": f"""CREATE TRIGGER IF NOT EXISTS message_fts_ad AFTER DELETE ON {MESSAGE_TABLE} BEGIN
        DELETE FROM {MESSAGE_FTS} WHERE rowid = old.id;
    END""",
    "message_fts_au": f"""CREATE TRIGGER IF NOT EXISTS message_fts_au
        AFTER UPDATE OF content, in_display, role, status ON {MESSAGE_TABLE}
        WHEN NOT (old.status = 'partial' AND new.status = 'partial') BEGIN
        DELETE FROM {MESSAGE_FTS} WHERE rowid = old.id;
        INSERT INTO {MESSAGE_FTS}(rowid, content, session_id)
            SELECT new.id, new.content, new.session_id WHERE {_INDEXED};
    END""",
    "session_fts_ai": f"""CREATE TRIGGER IF NOT EXISTS session_fts_ai AFTER INSERT ON {SESSION_TABLE}
        WHEN new.title != '' BEGIN
        INSERT INTO {TITLE_FTS}(title, session_id) VALUES (new.title, new.id);
    END""",
    # session_id is not indexed in an FTS5 table: a DELETE by it reads every title. A session with
    # no title has no row there, so the first title (set with the first message) reads nothing
    # (`old.title != ''` is decided before the scan).
    "session_fts_ad": f"""CREATE TRIGGER IF NOT EXISTS session_fts_ad AFTER DELETE ON {SESSION_TABLE} BEGIN
        DELETE FROM {TITLE_FTS} WHERE old.title != '' AND session_id = old.id;
    END""",
    "session_fts_au": f"""CREATE TRIGGER IF NOT EXISTS session_fts_au AFTER UPDATE OF title ON {SESSION_TABLE}
        WHEN old.title IS NOT new.title BEGIN
        DELETE FROM {TITLE_FTS} WHERE old.title != '' AND session_id = old.id;
        INSERT INTO {TITLE_FTS}(title, session_id) SELECT new.title, new.id WHERE new.title != '';
    END""",
}


# --- the index ------------------------------------------------------------------------------
def ensure_search_index(conn=connection) -> None:
    """Create the FTS5 tables and triggers if missing (idempotent). A table rebuild by a later
    migration drops the triggers; then the index is refilled from the tables."""
    if conn.vendor != "sqlite":
        return
    tokenize = "tokenize='unicode61 remove_diacritics 2'"
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {MESSAGE_FTS} USING fts5(content, session_id UNINDEXED, {tokenize})"
        )
        cur.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {TITLE_FTS} USING fts5(title, session_id UNINDEXED, {tokenize})"
        )
        if install_missing_triggers(cur, [MESSAGE_TABLE, SESSION_TABLE], _TRIGGERS):
            _refill(cur)


def reinstall_message_triggers(conn=connection) -> None:
    """Replace the message triggers with the current ones (migration 0004: streaming rows are
    no longer indexed) and drop the index entries of rows that are streaming now."""
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cur:
        _replace_triggers(cur, "message_fts_ai", "message_fts_au")
        cur.execute(f"DELETE FROM {MESSAGE_FTS} WHERE rowid IN (SELECT id FROM {MESSAGE_TABLE} WHERE status = 'partial')")


def reinstall_session_triggers(conn=connection) -> None:
    """Replace the title triggers with the current ones (migration 0005: a first title no longer
    reads every indexed title)."""
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cur:
        _replace_triggers(cur, "session_fts_ad", "session_fts_au")


def _replace_triggers(cur, *names: str) -> None:
    for name in names:
        cur.execute(f"DROP TRIGGER IF EXISTS {name}")
        cur.execute(_TRIGGERS[name])


def _refill(cur) -> None:
    cur.execute(f"DELETE FROM {MESSAGE_FTS}")
    cur.execute(
        f"INSERT INTO {MESSAGE_FTS}(rowid, content, session_id) SELECT id, content, session_id FROM {MESSAGE_TABLE} "
        f"WHERE {_INDEXED.replace('new.', '')}"
    )
    cur.execute(f"DELETE FROM {TITLE_FTS}")
    cur.execute(f"INSERT INTO {TITLE_FTS}(title, session_id) SELECT title, id FROM {SESSION_TABLE} WHERE title != ''")


def drop_search_index(conn=connection) -> None:
    if conn.vendor != "sqlite":
        return
    with conn.cursor() as cur:
        for name in _TRIGGERS:
            cur.execute(f"DROP TRIGGER IF EXISTS {name}")
        cur.execute(f"DROP TABLE IF EXISTS {MESSAGE_FTS}")
        cur.execute(f"DROP TABLE IF EXISTS {TITLE_FTS}")


# --- queries --------------------------------------------------------------------------------
@dataclass
class Hit:
    session_id: str
    score: float  # lower is better (bm25 convention)
    message_id: int | None = None  # the best matching message, for the snippet
    title_match: bool = False


def search_sessions(user, query: str, limit: int = MAX_RESULTS) -> list[tuple[Session, str, int | None]]:
    """The user's sessions matching every word of `query`, best first, each with an HTML snippet
    and the id of its best-matching message (None when only the title matched)."""
    terms = query_terms(query, MAX_TERMS)
    if not terms:
        return []
    if connection.vendor == "sqlite":
        hits, snippets = _search_sqlite(user.pk, terms, limit)
    elif connection.vendor == "postgresql":
        hits, snippets = _search_postgres(user.pk, terms, limit)
    else:
        hits, snippets = _search_like(user.pk, terms, limit)
    sessions = Session.objects.select_related("profile").in_bulk([h.session_id for h in hits])
    out = []
    for hit in hits:
        session = sessions.get(uuid.UUID(str(hit.session_id)))
        if session is None:
            continue
        if hit.message_id is not None and hit.message_id in snippets:
            snippet, message_id = snippets[hit.message_id], hit.message_id
        else:
            snippet, message_id = highlight(session.title, terms), None
        out.append((session, snippet, message_id))
    return out


def _rank(message_hits: dict[str, tuple[float, int]], title_hits: dict[str, float], limit: int) -> list[Hit]:
    hits: dict[str, Hit] = {}
    for sid, (score, mid) in message_hits.items():
        hits[sid] = Hit(sid, score, mid)
    for sid, score in title_hits.items():
        hit = hits.setdefault(sid, Hit(sid, 0.0))
        hit.score += TITLE_WEIGHT * score
        hit.title_match = True
    return sorted(hits.values(), key=lambda h: h.score)[:limit]


def _search_sqlite(owner_id: int, terms: list[str], limit: int) -> tuple[list[Hit], dict[int, str]]:
    match = fts5_match(terms, every=True, prefix_from=MIN_PREFIX)
    with connection.cursor() as cur:
        # MATERIALIZED: bm25() only works in the query on the FTS table itself, so the subquery
        # must not be flattened into the aggregate. The bare rowid next to MIN() comes from the
        # row holding the minimum (an SQLite guarantee).
        cur.execute(
            f"WITH h AS MATERIALIZED ("
            f"  SELECT session_id, rowid AS mid, bm25({MESSAGE_FTS}) AS score FROM {MESSAGE_FTS}"
            f"  WHERE {MESSAGE_FTS} MATCH %s) "
            f"SELECT h.session_id, h.mid, MIN(h.score) FROM h "
            f"JOIN {SESSION_TABLE} s ON s.id = h.session_id WHERE s.owner_id = %s GROUP BY h.session_id",
            [match, owner_id],
        )
        message_hits = {row[0]: (row[2], row[1]) for row in cur.fetchall()}
        cur.execute(
            f"WITH t AS MATERIALIZED ("
            f"  SELECT session_id, bm25({TITLE_FTS}) AS score FROM {TITLE_FTS} WHERE {TITLE_FTS} MATCH %s) "
            f"SELECT t.session_id, MIN(t.score) FROM t "
            f"JOIN {SESSION_TABLE} s ON s.id = t.session_id WHERE s.owner_id = %s GROUP BY t.session_id",
            [match, owner_id],
        )
        title_hits = {row[0]: row[1] for row in cur.fetchall()}
        hits = _rank(message_hits, title_hits, limit)
        ids = [h.message_id for h in hits if h.message_id is not None]
        snippets: dict[int, str] = {}
        if ids:
            marks = ", ".join(["%s"] * len(ids))
            cur.execute(
                f"SELECT rowid, snippet({MESSAGE_FTS}, 0, %s, %s, '…', 16) FROM {MESSAGE_FTS} "
                f"WHERE {MESSAGE_FTS} MATCH %s AND rowid IN ({marks})",
                [_START, _STOP, match, *ids],
            )
            snippets = {row[0]: marked_to_html(row[1]) for row in cur.fetchall()}
    return hits, snippets


def _search_postgres(owner_id: int, terms: list[str], limit: int) -> tuple[list[Hit], dict[int, str]]:
    from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector

    # Terms are \w+ only, so this raw tsquery has no syntax of the user's in it.
    query = SearchQuery(pg_tsquery(terms, every=True, prefix_from=MIN_PREFIX), search_type="raw", config="simple")
    vector = SearchVector("content", config="simple")  # the expression of the GIN index (0002)
    rows = (
        Message.objects.filter(session__owner_id=owner_id, in_display=True, role__in=("user", "assistant"))
        .exclude(status=Message.Status.PARTIAL)
        .annotate(document=vector)
        .filter(document=query)
        .annotate(rank=SearchRank(vector, query))
        .order_by("session_id", "-rank")
        .distinct("session_id")
        .values_list("session_id", "id", "rank")
    )
    # ts_rank: higher is better; negate to share the ranking with bm25.
    message_hits = {str(sid): (-rank, mid) for sid, mid, rank in rows}
    title_vector = SearchVector("title", config="simple")
    titles = (
        Session.objects.filter(owner_id=owner_id)
        .annotate(document=title_vector)
        .filter(document=query)
        .annotate(rank=SearchRank(title_vector, query))
        .values_list("id", "rank")
    )
    title_hits = {str(sid): -rank for sid, rank in titles}
    hits = _rank(message_hits, title_hits, limit)
    # Snippets in Python, not ts_headline: its parser drops tag-like text ("<script>") from the
    # excerpt, and the page should see what was written.
    ids = [h.message_id for h in hits if h.message_id is not None]
    contents = dict(Message.objects.filter(id__in=ids).values_list("id", "content"))
    return hits, {mid: highlight(_around(text, terms), terms) for mid, text in contents.items()}


def _search_like(owner_id: int, terms: list[str], limit: int) -> tuple[list[Hit], dict[int, str]]:
    """Other databases: every term as a substring; newest activity first."""
    cond = Q()
    for t in terms:
        cond &= Q(content__icontains=t)
    rows = (
        Message.objects.filter(cond, session__owner_id=owner_id, in_display=True, role__in=("user", "assistant"))
        .exclude(status=Message.Status.PARTIAL)
        .order_by("session_id", "-seq")
        .values_list("session_id", "id", "content")[:5000]
    )
    message_hits, contents = {}, {}
    for sid, mid, content in rows:
        message_hits.setdefault(str(sid), (-1.0, mid))
        contents[mid] = content
    title_cond = Q()
    for t in terms:
        title_cond &= Q(title__icontains=t)
    title_hits = {
        str(sid): -1.0 for sid in Session.objects.filter(title_cond, owner_id=owner_id).values_list("id", flat=True)
    }
    hits = _rank(message_hits, title_hits, limit)
    return hits, {h.message_id: highlight(_around(contents[h.message_id], terms), terms) for h in hits if h.message_id}


# --- snippets -------------------------------------------------------------------------------
def marked_to_html(text: str) -> str:
    """Escape everything, then turn the match markers into <mark> tags (balanced)."""
    out, open_ = [], False
    for part in re.split(f"([{_START}{_STOP}])", text or ""):
        if part == _START and not open_:
            out.append("<mark>")
            open_ = True
        elif part == _STOP and open_:
            out.append("</mark>")
            open_ = False
        elif part not in (_START, _STOP):
            out.append(html.escape(part))
    if open_:
        out.append("</mark>")
    return "".join(out)


def highlight(text: str, terms: list[str]) -> str:
    """`text` escaped, with words starting with (or equal to) a query term marked."""
    if not text or not terms:
        return html.escape(text or "")
    alternatives = "|".join(
        re.escape(t) + (r"\w*" if is_prefix(t, MIN_PREFIX) else r"(?!\w)") for t in sorted(terms, key=len, reverse=True)
    )
    pattern = re.compile(rf"(?<!\w)(?:{alternatives})", re.IGNORECASE)
    return marked_to_html(pattern.sub(lambda m: f"{_START}{m.group(0)}{_STOP}", text))


def _around(text: str, terms: list[str], width: int = 160) -> str:
    """A window of `text` around the first match (the LIKE path has no snippet function)."""
    lower = text.lower()
    at = min((i for i in (lower.find(t) for t in terms) if i >= 0), default=0)
    start = max(0, at - width // 3)
    piece = text[start : start + width]
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


def ensure_search_index_after_migrate(sender, using="default", **kwargs) -> None:
    """post_migrate receiver: a later migration that rebuilds the message or session table
    (SQLite) drops the FTS triggers; put them back and refill the index."""
    ensure_search_index(connections[using])
