"""Routines on two real server processes sharing PostgreSQL and Redis (like `make run-cluster`):
100 slots due at the same instant run exactly once each, whichever worker wins each claim; a
worker killed mid-run leaves the run `interrupted`, never run again; a restart of both workers
right after the slots ran does not run them again.

PostgreSQL: the server of DATABASE_URL when it is a postgres:// URL (`make test-postgres`), else
a throwaway cluster from this machine's PostgreSQL binaries.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from tests import redis_server
from tests.live_server import LiveNavi
from tests.llm_server import Rule, Turn
from tests.postgres_cluster import find_bin_dir, throwaway_cluster

pytestmark = pytest.mark.live
SLOTS = 100
STALE_S = 4


@contextlib.contextmanager
def postgres_url():
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        yield ""  # LiveNavi makes a database on that server
        return
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql) and DATABASE_URL is not postgres://")
    with throwaway_cluster(bin_dir) as url:
        yield url


@pytest.fixture(scope="module")
def workers(llm_live):
    if not redis_server.available():
        pytest.skip("redis-server is not installed; `apt-get install redis-server` (.ci/run does this)")
    data_dir = Path(tempfile.mkdtemp(prefix="navi-routines-live-"))
    with postgres_url() as database_url, redis_server.RedisServer() as redis:
        env = {"OLLAMA_HOST": llm_live.url, "REDIS_URL": redis.url, "ROUTINE_STALE_S": str(STALE_S), "ROUTINES_MAX_PER_USER": "500",
               **({"DATABASE_URL": database_url} if database_url else {})}
        a = LiveNavi(env=env, data_dir=data_dir)
        a.prepare()
        b = LiveNavi(env={**env, "DATABASE_URL": a.env["DATABASE_URL"]}, data_dir=data_dir)
        b.token = a.token
        a.start()
        b.start()
        try:
            yield a, b
        finally:
            a.stop()
            b.stop()
            if not database_url:
                from tests.live_server import drop_live_database
                drop_live_database(data_dir)


def create(navi: LiveNavi | httpx.Client, name: str, instruction: str, at: datetime) -> int:
    with contextlib.nullcontext(navi) if isinstance(navi, httpx.Client) else navi.api() as client:
        response = client.post("/routines", json={"name": name, "instruction": instruction,
                                                  "schedule": {"at": at.isoformat()}, "time_zone": "UTC"})
        assert response.status_code == 201, response.text
        return response.json()["id"]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} did not happen within {timeout:.0f} s")


def final_runs(navi: LiveNavi, ids: list[int]) -> list[tuple]:
    return navi.sql("SELECT routine_id, status, worker_id, session_id FROM routines_app_routinerun "
                    "WHERE routine_id = ANY(%s)", (ids,))


def test_many_slots_due_at_once_run_exactly_once_across_two_workers_and_a_restart(workers, llm_live):
    a, b = workers
    llm_live.reset()
    llm_live.add_rule(Rule(match="", system="planning step", turns=[Turn(content="DIRECT")]))
    # Both workers' loops must have looked since the routines exist (each wakes itself only):
    # half are created on each, all due at the same instant a little ahead.
    due = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=60)
    with a.api() as on_a, b.api() as on_b:
        ids = [create(on_a if i % 2 else on_b, f"slot {i}", f"slot check #{i:03d}", due) for i in range(SLOTS)]
    assert datetime.now(timezone.utc) < due - timedelta(seconds=20), "creating the routines took too long"

    def all_done():
        rows = final_runs(a, ids)
        return rows if len(rows) == SLOTS and all(r[1] not in ("running", "waiting_approval") for r in rows) else None

    rows = wait_for(all_done, 180, f"{SLOTS} routine runs")
    assert sorted(r[0] for r in rows) == sorted(ids)  # one row per routine: each slot claimed once
    assert {r[1] for r in rows} == {"ok"}
    claims = {w: sum(1 for r in rows if r[2] == w) for w in {r[2] for r in rows}}
    print(f"claims per worker: {claims}")
    assert len(claims) == 2, f"both workers should have raced for the slots: {claims}"
    # Each slot ran once: its chat holds one question and one answer.
    counts = a.sql("SELECT m.session_id, COUNT(*) FROM sessions_app_message m JOIN routines_app_routinerun r "
                   "ON r.session_id = m.session_id WHERE r.routine_id = ANY(%s) GROUP BY m.session_id", (ids,))
    assert len(counts) == SLOTS and {c for _, c in counts} == {2}
    asked = [r for r in llm_live.requests if "slot check #" in str(r.get("messages", [])[-1:])]
    assert len(asked) == SLOTS

    # A restart of both right after the slots ran runs none of them again. The sync point: a
    # new routine due after the restart has run, so both schedulers have made passes.
    a.stop()
    b.stop()
    a.start()
    b.start()
    later = create(a, "after restart", "after the restart", datetime.now(timezone.utc) + timedelta(seconds=3))
    wait_for(lambda: a.sql("SELECT status FROM routines_app_routinerun WHERE routine_id = %s AND status = 'ok'",
                           (later,)), 60, "the routine made after the restart")
    assert len(final_runs(a, ids)) == SLOTS
    assert len([r for r in llm_live.requests if "slot check #" in str(r.get("messages", [])[-1:])]) == SLOTS


def test_a_worker_killed_mid_run_leaves_it_interrupted_and_it_is_not_run_again(workers, llm_live):
    a, b = workers
    llm_live.reset()
    llm_live.add_rule(Rule(match="", system="planning step", turns=[Turn(content="DIRECT")]))
    llm_live.add_rule(Rule(match="slow job", turns=[Turn(content="never seen", hold=120)]))
    rid = create(a, "slow", "slow job", datetime.now(timezone.utc) + timedelta(days=1))
    with a.api() as client:
        assert client.post(f"/routines/{rid}/run").status_code == 202
    wait_for(lambda: any("slow job" in str(r.get("messages", [])[-1:]) for r in llm_live.requests), 30,
             "the run's LLM call")
    a.kill()  # SIGKILL mid-run: nothing gets to clean up
    a.start()  # the next start: the run's heartbeat goes stale, the other worker or this one reaps it
    rows = wait_for(lambda: a.sql("SELECT status, error, session_id FROM routines_app_routinerun WHERE routine_id = %s "
                                  "AND status = 'interrupted'", (rid,)), 60, "the interrupted mark")
    assert "not run again" in rows[0][1]
    assert len(a.sql("SELECT id FROM routines_app_routinerun WHERE routine_id = %s", (rid,))) == 1
    messages = a.sql("SELECT role, content FROM sessions_app_message WHERE session_id = %s ORDER BY seq", (rows[0][2],))
    assert messages[0] == ("user", "slow job") and not [m for m in messages if m[1] == "never seen"]
    assert sum("slow job" in str(r.get("messages", [])[-1:]) for r in llm_live.requests) == 1
    with httpx.Client(base_url=b.url, headers=b.headers) as client:
        runs = client.get(f"/routines/{rid}/runs").json()
    assert [r["status"] for r in runs] == ["interrupted"]
