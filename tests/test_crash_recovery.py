"""A real server survives what goes wrong around it, and says what to do next.

Kill -9 mid-answer and restart: the loop flushed the streaming answer as a `partial` row; the
restarted server marks it `interrupted` (text kept) and voids the dead run's claim, so the
session is usable at once (no 409 "a run is already active" until some timeout). An
unreachable Ollama, a missing model and a stream dropped mid-answer each end the run with an
`error` frame that says what to do, keep what was said, and leave the session usable.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from sessions_app.models import Message
from tests.live_server import LiveNavi
from tests.live_ws import assistant_rows, connect, deltas, post, recv_run, recv_until
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.live

ANSWER = "".join(f"word{i:03d} " for i in range(150))  # ~1 200 chars at 2 chars / 40 ms: ~24 s


@pytest.fixture
def llm(live_llm):
    """These tests share one LLM server per module (see conftest.live_llm)."""
    return live_llm


@pytest.fixture(scope="module")
def navi(llm_live):
    with LiveNavi(env={"OLLAMA_HOST": llm_live.url}) as server:
        yield server
        print(f"--- server log ---\n{server.log()[-4000:]}")


async def send_and_wait(navi: LiveNavi, session_id: str, content: str) -> list[dict]:
    async with connect(navi, session_id) as ws:
        await ws.send(json.dumps({"type": "message", "content": content}))
        return await recv_run(ws)


async def _wait_for_partial(navi: LiveNavi, session_id: str, timeout: float = 15) -> dict:
    """Poll the REST API (the observable state) until the answer is flushed as `partial`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = await asyncio.to_thread(assistant_rows, navi, session_id)
        if rows and rows[-1]["status"] == "partial" and rows[-1]["content"]:
            return rows[-1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no partial assistant row within {timeout}s:\n{navi.log()[-2000:]}")


async def test_kill_and_restart_marks_partial_interrupted_and_session_usable(navi, llm) -> None:
    llm.add_rule(Rule(match="tell me a long story", turns=[Turn(content=ANSWER, chunk_size=2, delay=0.04)]))
    sid = await asyncio.to_thread(navi.create_session)
    async with connect(navi, sid) as ws:
        await ws.send(json.dumps({"type": "message", "content": "tell me a long story"}))
        await recv_until(ws, lambda f: f["type"] == "stream_delta")
        partial = await _wait_for_partial(navi, sid)
        navi.kill()  # SIGKILL: no shutdown hook, no final save
    assert ANSWER.startswith(partial["content"])
    assert await asyncio.to_thread(llm.wait_for_disconnect, 10), "the LLM stream stayed open after the kill"

    await asyncio.to_thread(navi.start)
    rows = await asyncio.to_thread(assistant_rows, navi, sid)
    assert [r["status"] for r in rows] == ["interrupted"], rows
    kept = rows[0]["content"]
    assert kept and ANSWER.startswith(kept) and len(kept) >= len(partial["content"])

    # The dead run's claim is void at once: a new message is answered, not refused with 409.
    response = await post(navi, f"/sessions/{sid}/messages", {"content": "are you back?"})
    assert response.status_code == 200, response.text
    assert response.json()["content"] == "echo: are you back?"
    rows = await asyncio.to_thread(assistant_rows, navi, sid)
    assert [r["status"] for r in rows] == ["interrupted", "complete"]


async def test_a_graceful_shutdown_saves_the_partial_answer_as_interrupted(navi, llm) -> None:
    llm.add_rule(Rule(match="another long story", turns=[Turn(content=ANSWER, chunk_size=2, delay=0.04)]))
    sid = await asyncio.to_thread(navi.create_session)
    async with connect(navi, sid) as ws:
        await ws.send(json.dumps({"type": "message", "content": "another long story"}))
        await recv_until(ws, lambda f: f["type"] == "stream_delta")
        await _wait_for_partial(navi, sid)
        await asyncio.to_thread(navi.stop)  # SIGTERM: runs are stopped, not abandoned
    # Read before any restart (SQLite stores the UUID as 32 hex digits; PostgreSQL accepts them).
    [(status, content, claim)] = navi.sql(
        "SELECT m.status, m.content, s.active_run_id FROM sessions_app_message m "
        "JOIN sessions_app_session s ON s.id = m.session_id "
        "WHERE m.role = 'assistant' AND s.id = %s",
        (sid.replace("-", ""),),
    )
    assert status == "interrupted" and content and ANSWER.startswith(content)
    assert claim == ""
    await asyncio.to_thread(navi.start)


async def test_unreachable_ollama_error_says_what_to_do_and_session_recovers(navi, llm) -> None:
    sid = await asyncio.to_thread(navi.create_session)
    llm.stop()  # nothing listens on its port now
    try:
        frames = await send_and_wait(navi, sid, "anyone there?")
        assert frames[-1]["type"] == "error", frames
        assert "cannot reach Ollama" in frames[-1]["message"] and "ollama serve" in frames[-1]["message"]
        response = await post(navi, f"/sessions/{sid}/messages", {"content": "anyone there?"})
        assert response.status_code == 503, response.text
        assert "cannot reach Ollama" in response.json()["error"]
    finally:
        llm.start()  # same port
    frames = await send_and_wait(navi, sid, "back now?")
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "echo: back now?"


async def test_missing_model_error_lists_models_and_pull(navi, llm) -> None:
    sid = await asyncio.to_thread(navi.create_session)
    llm.models = ["other:1b"]
    frames = await send_and_wait(navi, sid, "hello?")
    assert frames[-1]["type"] == "error", frames
    assert "other:1b" in frames[-1]["message"] and "ollama pull" in frames[-1]["message"]
    llm.models = None
    frames = await send_and_wait(navi, sid, "hello again")
    assert frames[-1]["type"] == "stream_end"


async def test_stream_dropped_mid_answer_keeps_partial_and_session_usable(navi, llm) -> None:
    llm.add_rule(Rule(match="fragile", turns=[Turn(content="one two three four five six", chunk_size=3, drop_after=5)]))
    sid = await asyncio.to_thread(navi.create_session)
    frames = await send_and_wait(navi, sid, "a fragile answer please")
    assert frames[-1]["type"] == "error", frames
    said = deltas(frames)
    assert said == "one two three four f"[: len(said)] and said, said
    rows = await asyncio.to_thread(assistant_rows, navi, sid)
    assert [(r["status"], r["content"]) for r in rows] == [("interrupted", said)]
    frames = await send_and_wait(navi, sid, "try again")
    assert frames[-1]["type"] == "stream_end" and frames[-1]["content"] == "echo: try again"


# --- the recovery rules themselves (in-process, no server) ------------------------------------------
def _partial_answer(session) -> Message:
    return Message.objects.create(session=session, seq=1, role="assistant", content="half an ans", status="partial")


@pytest.mark.django_db
def test_start_up_recovery_voids_every_claim_without_redis(session, settings) -> None:
    from django.utils import timezone

    from agent.runs.manager import recover_after_crash

    settings.REDIS_URL = ""  # in-memory layer: this process is the only worker, every claim is dead
    session.active_run_id, session.active_run_heartbeat = "dead-run", timezone.now()
    session.save()
    row = _partial_answer(session)
    assert recover_after_crash() == 1
    row.refresh_from_db(), session.refresh_from_db()
    assert (row.status, row.content, session.active_run_id) == ("interrupted", "half an ans", "")


@pytest.mark.django_db
def test_start_up_recovery_spares_a_live_claim_of_another_worker_with_redis(session, settings) -> None:
    from django.utils import timezone

    from agent.runs.manager import recover_after_crash

    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # several workers: a fresh heartbeat is alive
    session.active_run_id, session.active_run_heartbeat = "live-run", timezone.now()
    session.save()
    row = _partial_answer(session)
    assert recover_after_crash() == 0
    row.refresh_from_db(), session.refresh_from_db()
    assert (row.status, session.active_run_id) == ("partial", "live-run")


@pytest.mark.django_db(transaction=True)
async def test_taking_over_a_stale_claim_interrupts_the_dead_runs_partial_row(session) -> None:
    from asgiref.sync import sync_to_async
    from django.utils import timezone

    from agent.runs.manager import CLAIM_TTL, claim_run

    session.active_run_id = "crashed-worker-run"
    session.active_run_heartbeat = timezone.now() - CLAIM_TTL * 2
    await session.asave()
    row = await sync_to_async(_partial_answer)(session)
    assert await claim_run(str(session.pk), "new-run")
    await row.arefresh_from_db()
    assert (row.status, row.content) == ("interrupted", "half an ans")
