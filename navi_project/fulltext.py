"""The words of a search and the full-text queries made of them, shared by the searches over
chats (sessions_app), facts (memory_app) and documents' passages (knowledge_app).

A term is a run of word characters, so no syntax of what the user typed reaches the database:
neither FTS5's (`"`, `*`, `NEAR(`) nor tsquery's (`&`, `!`, `:*`). FTS5 terms are quoted besides.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)


def query_terms(query: str, limit: int) -> list[str]:
    """The distinct lowercase words of `query` in order, the first `limit` of them."""
    seen: list[str] = []
    for term in _WORD.findall(query.lower()):
        if term not in seen:
            seen.append(term)
    return seen[:limit]


def is_prefix(term: str, prefix_from: int | None) -> bool:
    """Whether `term` also matches the words it begins (terms of `prefix_from` characters or more)."""
    return prefix_from is not None and len(term) >= prefix_from


def fts5_match(terms: list[str], *, every: bool = False, prefix_from: int | None = None) -> str:
    """An FTS5 MATCH expression: any of the quoted terms (all of them with `every`)."""
    joiner = " " if every else " OR "
    return joiner.join(f'"{t}"*' if is_prefix(t, prefix_from) else f'"{t}"' for t in terms)


def pg_tsquery(terms: list[str], *, every: bool = False, prefix_from: int | None = None) -> str:
    """The same for PostgreSQL's to_tsquery()."""
    joiner = " & " if every else " | "
    return joiner.join(f"{t}:*" if is_prefix(t, prefix_from) else t for t in terms)


def install_missing_triggers(cur, tables: list[str], triggers: dict[str, str]) -> bool:
    """Create those of `triggers` (name: CREATE TRIGGER statement) that `tables` lack (SQLite); True
    if any did: a table rebuild by a later migration drops them, and the index needs refilling."""
    marks = ", ".join(["%s"] * len(tables))
    cur.execute(f"SELECT name FROM sqlite_master WHERE type='trigger' AND tbl_name IN ({marks})", tables)
    present = {row[0] for row in cur.fetchall()}
    missing = [name for name in triggers if name not in present]
    for name in missing:
        cur.execute(triggers[name])
    return bool(missing)
