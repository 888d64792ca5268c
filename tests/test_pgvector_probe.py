"""pgvector on PostgreSQL: created once however many workers start at once, tried in a
connection of its own before any use, and never used (nor tried again) once it broke a backend.

Runs on PostgreSQL only (`make test-postgres`); SQLite has no such extension to try.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest
from django.db import connection

from knowledge_app import pgvector_probe, vectors
from tests.test_knowledge import indexed, results  # as the knowledge tests wait for indexing

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("knowledge_state")]


@pytest.fixture(autouse=True)
def postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("pgvector is PostgreSQL's: `make test-postgres` runs this")


def _own(params: dict):
    return psycopg.connect(**{k: v for k, v in params.items() if k not in ("context", "cursor_factory")}, autocommit=True)


def _params() -> dict:
    return connection.get_connection_params()


@pytest.fixture
def fresh_verdicts():
    """No verdict kept from earlier tests, and none left for later ones."""
    def clear() -> None:
        with _own(_params()) as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {pgvector_probe.TABLE} (key text PRIMARY KEY, status text NOT NULL, "
                         "detail text NOT NULL DEFAULT '', at timestamptz NOT NULL DEFAULT now())")
            conn.execute(f"DELETE FROM {pgvector_probe.TABLE}")
        vectors.forget()

    clear()
    yield
    clear()


class _Database:
    """Stands in for Django's connection to another database (what `check` reads of it)."""

    def __init__(self, params: dict) -> None:
        self.params = params

    def get_connection_params(self) -> dict:
        return dict(self.params)


def test_two_workers_starting_at_once_create_it_once_and_both_use_it() -> None:
    params = _params()
    name = f"navi_race_{uuid.uuid4().hex[:10]}"
    with _own(params) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        fresh = _Database({**params, "dbname": name})
        start = threading.Barrier(2)
        outcomes: list[str] = []

        def worker() -> None:
            start.wait()
            try:
                outcomes.append(pgvector_probe.check(fresh))
            except Exception as exc:  # noqa: BLE001 - the assertion below shows it
                outcomes.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert outcomes == ["ok", "ok"]
        with _own(fresh.params) as conn:
            assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone()[0] == 1
            rows = conn.execute(f"SELECT status FROM {pgvector_probe.TABLE}").fetchall()
            assert rows == [("ok",)]  # tried once: the second worker read the verdict
    finally:
        with _own(params) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_pgvector_that_kills_its_backend_is_not_used_nor_tried_again(owner_client, embed, fresh_verdicts,
                                                                       monkeypatch) -> None:
    # The backend running the try dies as one hit by SIGILL would (without taking the server
    # down with it): its connection is gone mid-statement.
    monkeypatch.setattr(pgvector_probe, "PROBE_SQL", (*pgvector_probe.PROBE_SQL[:2],
                                                      "SELECT pg_terminate_backend(pg_backend_pid())"))
    health = owner_client.get("/health").json()
    assert health["status"] == "degraded"
    assert "not usable" in health["vectors"] and "backend died" in health["vectors"], health["vectors"]
    doc = indexed(owner_client, "a.txt", "I drink a double espresso every morning.")
    assert doc["status"] == "ready"
    assert "espresso" in results(owner_client, "espresso")[0]["text"]  # the words answer
    assert results(owner_client, "coffee") == []  # no vectors were made
    assert owner_client.get("/knowledge").json()["search"] == "words"

    # Another worker (or this one restarted) reads the verdict: it does not try again.
    monkeypatch.setattr(pgvector_probe, "PROBE_SQL", ("SELECT 1 / 0",))
    vectors.forget()
    assert "backend died" in vectors.available()


def test_a_try_that_never_came_back_is_taken_as_a_crash(fresh_verdicts) -> None:
    """The worker trying it died with the server's backends (a real SIGILL resets them all):
    the row it left says "probing", and the next worker holding the lock knows what that means."""
    with _own(_params()) as conn:
        key = pgvector_probe._key(conn, vectors.PG_EXTENSION)
        conn.execute(f"INSERT INTO {pgvector_probe.TABLE} (key, status) VALUES (%s, 'probing')", [key])
    verdict = vectors.available()
    assert "did not come back" in verdict and "make pgvector" in verdict
    vectors.forget()
    assert vectors.available() == verdict  # kept: not tried again


def test_a_working_pgvector_is_tried_once_and_used(owner_client, embed, fresh_verdicts) -> None:
    assert vectors.available() == "ok"
    with _own(_params()) as conn:
        assert [r[0] for r in conn.execute(f"SELECT status FROM {pgvector_probe.TABLE}")] == ["ok"]
    indexed(owner_client, "a.txt", "I drink a double espresso every morning.")
    assert "espresso" in results(owner_client, "coffee")[0]["text"]  # found by meaning
