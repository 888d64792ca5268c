"""The vector index, chosen per database: sqlite-vec in the SQLite file, pgvector on PostgreSQL.

Each space (`VectorSpace`: one model, one dimension) has a table per kind of thing embedded
("passage", "fact"), keyed by that thing's id and partitioned by owner, so a search only ever
looks at the caller's vectors. PostgreSQL: a table with a `vector(dim)` column and an HNSW index.

SQLite: a `vec0` virtual table (`owner_id` a partition key). sqlite-vec has no ANN index: a
KNN query compares every vector of the owner, and over float vectors that cost ~80 ms of CPU
at 100 000 passages. So, as sqlite-vec's binary-quantization guide does, the scanned column is
`coarse`, the vector's signs as bits (`vec_quantize_binary`: 48 bytes for 384 dimensions
instead of 1 536); the nearest `COARSE` by hamming distance are then re-scored with the float
vector, an auxiliary column (`+embedding`: read by rowid, never scanned) and
`vec_distance_cosine`. A space whose owner has at most `COARSE` vectors is thus searched exactly.
Tables made before this (float vectors in the scanned column) are rebuilt by `upgrade`.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time

from django.db import connection, connections, transaction

from . import pgvector_probe
from .models import VectorSpace

log = logging.getLogger(__name__)
KINDS = ("passage", "fact")
PGVECTOR_HINT = (
    "install pgvector on the PostgreSQL server (PGDG's `postgresql-15-pgvector` package, `make pgvector` "
    "on a Debian server, or the `pgvector/pgvector` image) and run `CREATE EXTENSION vector` as a superuser"
)
PG_EXTENSION = "vector"  # pgvector's name in CREATE EXTENSION
SQLITE_PROBE = "vec_version"  # a function sqlite-vec adds: there when it is loaded
_TABLE = re.compile(r"^knowledge_vec_(\d+)_(passage|fact)$")
# Hamming candidates re-scored with the float vectors. sqlite-vec's KNN keeps its top k with a
# selection whose cost grows with k × rows: at 100 000 vectors ~7 ms for k=50, ~12 for 100,
# ~30 for 200 (bench/README). Real embeddings' near neighbours are far nearer by hamming distance
# than the rest, so 100 candidates hold the nearest ones (bench/knowledge.py measures the agreement).
COARSE = 100
MAX_COARSE = 4096  # sqlite-vec's own limit on k
_OLD_DIM = re.compile(r"embedding float\[(\d+)\]")
_checked: dict[str, str] = {}  # database alias -> "ok" or why vectors cannot be stored
_checked_at: dict[str, float] = {}
# PostgreSQL without a usable pgvector is asked again after this long: one installed (or fixed)
# meanwhile is used without restarting every worker.
PG_RECHECK_S = 300.0
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
        if alias in _checked and (_checked[alias] == "ok" or connection.vendor != "postgresql"
                                  or time.monotonic() - _checked_at.get(alias, 0.0) < PG_RECHECK_S):
            return _checked[alias]
    if connection.vendor == "sqlite":
        try:
            with connection.cursor() as cur:
                cur.execute(f"SELECT {SQLITE_PROBE}()")
            found = "ok"
        except Exception as exc:  # noqa: BLE001
            found = _checked.get(alias) or f"sqlite-vec is not loaded ({exc}); install the `sqlite-vec` package"
        if found == "ok":
            try:
                upgrade(connection)
            except Exception as exc:  # noqa: BLE001 - e.g. another process upgrading now: not kept, asked again
                log.warning("vector tables not upgraded yet: %s", exc)
                return f"the vector tables are being upgraded ({exc}); search uses the words until it is done"
    elif connection.vendor == "postgresql":
        found, keep = _pgvector()
        if not keep:
            return found
    else:
        found = f"{connection.vendor} has no vector index Navi knows"
    with _lock:
        _checked[alias] = found
        _checked_at[alias] = time.monotonic()
    return found


def upgrade(conn=connection) -> int:
    """Rebuild float-only SQLite vector tables with the `coarse` bit column, vectors copied; how
    many were. Idempotent: migration 0003 and each process's first use (`available`) call it."""
    if conn.vendor != "sqlite":
        return 0
    done = 0
    for name in [n for n, sql in _vector_tables(conn) if not _quantized(sql)]:
        with transaction.atomic(using=conn.alias), conn.cursor() as cur:
            sql = dict(_vector_tables(conn)).get(name)
            if sql is None or _quantized(sql):
                continue  # another process did it meanwhile
            found = _OLD_DIM.search(sql)
            if found is None:
                raise ValueError(f"{name} has a layout Navi does not know: {sql}")
            dim = int(found.group(1))
            # vec0 does not rename its shadow tables: copy out, drop, make anew, copy back.
            cur.execute(f"CREATE TEMP TABLE knowledge_vec_upgrade AS SELECT rowid AS id, owner_id, embedding FROM {name}")
            cur.execute(f"DROP TABLE {name}")
            _create_sqlite(cur, name, dim)
            cur.execute(f"INSERT INTO {name}(rowid, owner_id, coarse, embedding) "
                        f"SELECT id, owner_id, {_coarse('embedding', dim)}, embedding FROM knowledge_vec_upgrade")
            cur.execute("DROP TABLE knowledge_vec_upgrade")
        done += 1
    return done


def _vector_tables(conn) -> list[tuple[str, str]]:
    with conn.cursor() as cur:
        cur.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        return [(name, sql or "") for name, sql in cur.fetchall() if _TABLE.match(name)]


def _quantized(sql: str) -> bool:
    return " coarse bit[" in sql


def forget() -> None:
    """Check again on the next call (tests switch databases and extensions)."""
    with _lock:
        _checked.clear()
        _checked_at.clear()
        _versions.clear()


def _pgvector() -> tuple[str, bool]:
    """("ok" or why pgvector is not used — the words are —, whether to keep that answer): see
    knowledge_app/pgvector_probe.py. A server that could not be asked (recovering, unreachable)
    is asked again on the next call."""
    try:
        return pgvector_probe.check(connection, PG_EXTENSION), True
    except pgvector_probe.NoExtension as exc:
        return f"PostgreSQL has no pgvector extension ({exc}): {PGVECTOR_HINT}", True
    except Exception as exc:  # noqa: BLE001 - e.g. the database restarting: not kept, asked again
        return f"PostgreSQL could not be asked about pgvector now ({str(exc).strip().splitlines()[0]})", False


def table(space: VectorSpace, kind: str) -> str:
    assert kind in KINDS
    return f"knowledge_vec_{space.pk}_{kind}"


def space_for(model: str, dim: int) -> VectorSpace:
    """The space of `model` at `dim`, its tables made if new."""
    space, _ = VectorSpace.objects.get_or_create(model=model, dim=dim)
    for kind in KINDS:
        _create(space, kind)
    return space


def _bits(dim: int) -> int:
    return (int(dim) + 7) // 8 * 8  # a bit vector is whole bytes


def _coarse(expr: str, dim: int) -> str:
    """SQL for the bit vector of the float32 blob `expr`, padded with zeros to whole bytes."""
    pad = _bits(dim) - int(dim)
    return f"vec_quantize_binary(unhex(hex({expr}) || '{'00' * 4 * pad}'))" if pad else f"vec_quantize_binary({expr})"


def _create_sqlite(cur, name: str, dim: int) -> None:
    cur.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING vec0("
                f"owner_id integer partition key, coarse bit[{_bits(dim)}], +embedding blob)")


def _create(space: VectorSpace, kind: str) -> None:
    name = table(space, kind)
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            _create_sqlite(cur, name, space.dim)
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


def unit(vector) -> list[float] | None:
    """`vector` scaled to length 1, or None when it points nowhere: all zeros, empty, or holding
    something that is not a finite number. Cosine distance ignores length, so storing unit
    vectors changes no result, and keeps float32's range: an embedding server's [0, 0, …]
    (no direction: its cosine distance is NULL in sqlite-vec, NaN in pgvector), 1e-30s
    (their squares vanish in float32: distance -inf, first in every search) or 3e38s (they
    overflow it) never reach the index."""
    try:
        values = [float(x) for x in vector]
    except (TypeError, ValueError):
        return None
    if not values or not all(math.isfinite(x) for x in values):
        return None
    top = max(abs(x) for x in values)
    if top == 0.0:
        return None
    scaled = [x / top for x in values]  # the largest is ±1: no square under- or overflows
    norm = math.sqrt(sum(x * x for x in scaled))
    return [x / norm for x in scaled]


def write(space: VectorSpace, kind: str, rows: list[tuple[int, int, list[float]]], *, replace: bool = False) -> int:
    """Store (id, owner_id, vector) rows as unit vectors; `replace`: those ids may have one in
    this space already (it goes either way). A row whose vector points nowhere (`unit`) gets
    none: its passage or fact stays findable by its words. Returns how many were stored."""
    if not rows:
        return 0
    name = table(space, kind)
    kept = [(i, owner, u) for i, owner, v in rows if (u := unit(v)) is not None and len(u) == space.dim]
    if len(kept) < len(rows):
        log.warning("%d of %d %s vectors from the embedding server are zero, not numbers or of the wrong size; "
                    "those are found by their words only", len(rows) - len(kept), len(rows), kind)
    with transaction.atomic(), connection.cursor() as cur:
        if replace:
            _delete_ids(cur, name, [row[0] for row in rows])
        if not kept:
            return 0
        rows = kept
        if connection.vendor == "sqlite":
            cur.executemany(f"INSERT INTO {name}(rowid, owner_id, coarse, embedding) "
                            f"VALUES (%s, %s, {_coarse('%s', space.dim)}, %s)",
                            [(i, owner, blob, blob) for i, owner, v in rows for blob in [_literal(v)]])
        else:
            cur.executemany(f"INSERT INTO {name}(id, owner_id, embedding) VALUES (%s, %s, %s::vector)",
                            [(i, owner, _literal(v)) for i, owner, v in rows])
    return len(rows)


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
    """The owner's `k` nearest ids to `vector` with their cosine distance, nearest first. A
    stored vector whose distance is no number (a zero vector stored before `unit` refused
    them: NULL in sqlite-vec, NaN in pgvector, or -inf) is left out; a query vector that
    points nowhere finds nothing (the words still do)."""
    name, k = table(space, kind), max(1, min(int(k), 1000))
    vector = unit(vector)
    if vector is None or len(vector) != space.dim:
        return []
    if connection.vendor == "sqlite":
        query = _literal(vector)
        # NULL sorts first in SQLite: filtered before the LIMIT, or a zero vector would take a place.
        sql = (f"WITH near AS (SELECT rowid, embedding FROM {name} WHERE coarse MATCH {_coarse('%s', space.dim)} "
               "AND k = %s AND owner_id = %s), "
               "scored AS (SELECT rowid, vec_distance_cosine(embedding, %s) AS d FROM near) "
               f"SELECT rowid, d FROM scored WHERE d BETWEEN {-DISTANCE_SLACK} AND {2 + DISTANCE_SLACK} "
               "ORDER BY d, rowid LIMIT %s")
        with connection.cursor() as cur:
            cur.execute(sql, [query, min(MAX_COARSE, max(COARSE, 2 * k)), owner_id, query, k])
            return [(int(i), float(d)) for i, d in cur.fetchall() if _distance(d)]
    literal = _literal(vector)
    with transaction.atomic(), connection.cursor() as cur:
        # The HNSW index is searched first and filtered after: without an iterative scan a
        # busy index could return fewer than k of this owner's rows (pgvector >= 0.8).
        settings = f"SET LOCAL hnsw.ef_search = {max(40, k)}"
        if _pgvector_version(cur) >= (0, 8):
            settings += "; SET LOCAL hnsw.iterative_scan = relaxed_order"
        cur.execute(settings)  # one round trip
        cur.execute(f"SELECT id, embedding <=> %s::vector AS d FROM {name} WHERE owner_id = %s ORDER BY d LIMIT %s",
                    [literal, owner_id, k])
        rows = [(int(i), float(d)) for i, d in cur.fetchall() if _distance(d)]  # NaN sorts last: dropped here
    return sorted(rows, key=lambda row: row[1])


DISTANCE_SLACK = 0.001  # cosine distance is 0..2; float32 rounding strays a little past either end


def _distance(d) -> bool:
    """A cosine distance that is a number in its range (not NULL, NaN or ±inf)."""
    return d is not None and math.isfinite(float(d)) and -DISTANCE_SLACK <= float(d) <= 2 + DISTANCE_SLACK


_versions: dict[str, tuple[int, ...]] = {}  # database alias -> pgvector's version


def _pgvector_version(cur) -> tuple[int, ...]:
    if connection.alias not in _versions:
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = %s", [PG_EXTENSION])
        row = cur.fetchone()
        _versions[connection.alias] = tuple(int(p) for p in (row or ("0",))[0].split(".")[:2])
    return _versions[connection.alias]


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
