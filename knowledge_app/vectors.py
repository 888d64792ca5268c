"""The vector index, chosen per database: sqlite-vec in the SQLite file, pgvector on PostgreSQL.

Each space (`VectorSpace`: one model, one dimension) has a table per kind of thing embedded
("passage", "fact"), keyed by that thing's id and partitioned by owner, so a search only ever
looks at the caller's vectors. SQLite: a `vec0` virtual table (`owner_id` a partition key,
cosine distance). PostgreSQL: a table with a `vector(dim)` column and an HNSW index.
"""

from __future__ import annotations

import logging
import re
import threading

from django.db import connection, connections, transaction

from .models import VectorSpace

log = logging.getLogger(__name__)
KINDS = ("passage", "fact")
PGVECTOR_HINT = (
    "install pgvector on the PostgreSQL server (PGDG's `postgresql-15-pgvector` package, or the "
    "`pgvector/pgvector` image) and run `CREATE EXTENSION vector` as a superuser"
)
_TABLE = re.compile(r"^knowledge_vec_(\d+)_(passage|fact)$")
_checked: dict[str, str] = {}  # database alias -> "ok" or why vectors cannot be stored
_lock = threading.Lock()


def load_sqlite_vec(sender, connection, **kwargs) -> None:
    """connection_created receiver: load sqlite-vec into each new SQLite connection."""
    if connection.vendor != "sqlite":
        return
    raw = connection.connection
    try:
        import sqlite_vec  # noqa: PLC0415 - optional: without it search uses the words

        raw.enable_load_extension(True)
        try:
            sqlite_vec.load(raw)
        finally:
            raw.enable_load_extension(False)
    except (ImportError, AttributeError, Exception) as exc:  # noqa: BLE001 - any failure: words only
        _checked[connection.alias] = (
            f"sqlite-vec cannot be loaded ({exc}); install the `sqlite-vec` and `pysqlite3-binary` packages"
        )


def available() -> str:
    """"ok", or why this database cannot hold vectors (search then uses the words)."""
    alias = connection.alias
    with _lock:
        if alias in _checked:
            return _checked[alias]
    if connection.vendor == "sqlite":
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT vec_version()")
            found = "ok"
        except Exception as exc:  # noqa: BLE001
            found = _checked.get(alias) or f"sqlite-vec is not loaded ({exc}); install the `sqlite-vec` package"
    elif connection.vendor == "postgresql":
        found = _pgvector()
    else:
        found = f"{connection.vendor} has no vector index Navi knows"
    with _lock:
        _checked[alias] = found
    return found


def forget() -> None:
    """Check again on the next call (tests switch databases and extensions)."""
    with _lock:
        _checked.clear()


def _pgvector() -> str:
    try:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
            if cur.fetchone() is None:
                cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - the extension is missing or not ours to create
        return f"PostgreSQL has no pgvector extension ({str(exc).splitlines()[0]}): {PGVECTOR_HINT}"


def table(space: VectorSpace, kind: str) -> str:
    assert kind in KINDS
    return f"knowledge_vec_{space.pk}_{kind}"


def space_for(model: str, dim: int) -> VectorSpace:
    """The space of `model` at `dim`, its tables made if new."""
    space, _ = VectorSpace.objects.get_or_create(model=model, dim=dim)
    for kind in KINDS:
        _create(space, kind)
    return space


def _create(space: VectorSpace, kind: str) -> None:
    name = table(space, kind)
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING vec0("
                f"owner_id integer partition key, embedding float[{int(space.dim)}] distance_metric=cosine)"
            )
        else:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {name} (id bigint PRIMARY KEY, owner_id bigint NOT NULL, "
                f"embedding vector({int(space.dim)}) NOT NULL)"
            )
            cur.execute(f"CREATE INDEX IF NOT EXISTS {name}_hnsw ON {name} USING hnsw (embedding vector_cosine_ops)")
            cur.execute(f"CREATE INDEX IF NOT EXISTS {name}_owner ON {name} (owner_id)")


def _literal(vector: list[float]):
    if connection.vendor == "sqlite":
        import sqlite_vec  # noqa: PLC0415 - only here when the extension loaded

        return sqlite_vec.serialize_float32(vector)
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def write(space: VectorSpace, kind: str, rows: list[tuple[int, int, list[float]]], *, replace: bool = False) -> None:
    """Store (id, owner_id, vector) rows; `replace`: those ids may have one in this space already."""
    if not rows:
        return
    name = table(space, kind)
    with transaction.atomic(), connection.cursor() as cur:
        if replace:
            _delete_ids(cur, name, [row[0] for row in rows])
        if connection.vendor == "sqlite":
            cur.executemany(f"INSERT INTO {name}(rowid, owner_id, embedding) VALUES (%s, %s, %s)",
                            [(i, owner, _literal(v)) for i, owner, v in rows])
        else:
            cur.executemany(f"INSERT INTO {name}(id, owner_id, embedding) VALUES (%s, %s, %s::vector)",
                            [(i, owner, _literal(v)) for i, owner, v in rows])


def _delete_ids(cur, name: str, ids: list[int]) -> None:
    # One id at a time: a rowid lookup in sqlite-vec (an IN list would scan the whole table).
    key = "rowid" if connection.vendor == "sqlite" else "id"
    cur.executemany(f"DELETE FROM {name} WHERE {key} = %s", [(i,) for i in ids])


def delete(kind: str, ids: list[int]) -> None:
    """Remove the vectors of these ids from every space."""
    if not ids or available() != "ok":
        return
    existing = set(connection.introspection.table_names())
    with connection.cursor() as cur:
        for space in VectorSpace.objects.all():
            name = table(space, kind)
            if name in existing:
                _delete_ids(cur, name, ids)


def nearest(space: VectorSpace, kind: str, owner_id: int, vector: list[float], k: int) -> list[tuple[int, float]]:
    """The owner's `k` nearest ids to `vector` with their cosine distance, nearest first."""
    name, k = table(space, kind), max(1, min(int(k), 1000))
    if connection.vendor == "sqlite":
        sql = (f"SELECT rowid, distance FROM {name} WHERE embedding MATCH %s AND k = %s AND owner_id = %s "
               "ORDER BY distance")
        with connection.cursor() as cur:
            cur.execute(sql, [_literal(vector), k, owner_id])
            return [(int(i), float(d)) for i, d in cur.fetchall()]
    literal = _literal(vector)
    with transaction.atomic(), connection.cursor() as cur:
        # The HNSW index is searched first and filtered after: without an iterative scan a
        # busy index could return fewer than k of this owner's rows (pgvector >= 0.8).
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        version = tuple(int(p) for p in (cur.fetchone() or ("0",))[0].split(".")[:2])
        if version >= (0, 8):
            cur.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        cur.execute(f"SET LOCAL hnsw.ef_search = {max(40, k)}")
        cur.execute(f"SELECT id, embedding <=> %s::vector AS d FROM {name} WHERE owner_id = %s ORDER BY d LIMIT %s",
                    [literal, owner_id, k])
        rows = [(int(i), float(d)) for i, d in cur.fetchall()]
    return sorted(rows, key=lambda row: row[1])


def drop_space(space: VectorSpace) -> None:
    """Drop a space's tables and its row (a model no longer used, once all is re-embedded)."""
    with connection.cursor() as cur:
        for kind in KINDS:
            cur.execute(f"DROP TABLE IF EXISTS {table(space, kind)}")
    space.delete()


def drop_orphan_tables(sender=None, using="default", **kwargs) -> None:
    """post_migrate receiver (also after a flush): drop vector tables whose space is gone."""
    conn = connections[using]
    try:
        names = [n for n in conn.introspection.table_names() if n.startswith("knowledge_vec_")]
        spaces = set(VectorSpace.objects.using(using).values_list("pk", flat=True))
    except Exception:  # noqa: BLE001 - tables not migrated yet
        return
    with conn.cursor() as cur:
        for name in names:
            found = _TABLE.match(name)  # not sqlite-vec's own shadow tables: they go with theirs
            if found and int(found.group(1)) not in spaces:
                cur.execute(f"DROP TABLE IF EXISTS {name}")
