"""Live runs across real server processes: replay + live frames exactly once, stop from any
worker, reconnect with `after_seq`, one run per session.

Two daphne processes share one SQLite database and a real redis-server (channels_redis); a
third runs alone on the in-memory layer. The LLM is the protocol-level test server with slow,
paced turns so that sockets can join mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests import redis_server
from tests.live_server import LiveNavi
from tests.live_ws import (
    assert_contiguous,
    assistant_rows,
    connect,
    deltas,
    post,
    recv_frame,
    recv_run,
    recv_until,
)
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.live

STORY = "".join(f"<{i:02d} the quick brown fox> " for i in range(30))  # 720 chars
LONG = "".join(f"[{i:03d} a very slow answer] " for i in range(200))  # stopped long before the end


def is_delta(frame: dict) -> bool:
    return frame["type"] == "stream_delta"


@pytest.fixture
def llm(live_llm):
    """These tests share one LLM server per module (see conftest.live_llm)."""
    return live_llm


@pytest.fixture(scope="module")
def redis():
    if not redis_server.available():
        pytest.skip("redis-server is not installed; `apt-get install redis-server` (.ci/run does this)")
    with redis_server.RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def workers(redis, llm_live):
    """Worker A and worker B: two processes, one database, one Redis channel layer."""
    env = {"REDIS_URL": redis.url, "OLLAMA_HOST": llm_live.url}
    with LiveNavi(env=env) as a, LiveNavi(env=env, data_dir=a.data_dir) as b:
        yield a, b
        print_tails(a, b)


@pytest.fixture(scope="module")
def single(llm_live):
    """One process on the in-memory channel layer (the embedded default)."""
    with LiveNavi(env={"OLLAMA_HOST": llm_live.url}) as navi:
        yield navi
        print_tails(navi)


def print_tails(*servers: LiveNavi) -> None:
    """Server logs end up in the report of a failing test (captured output)."""
    for navi in servers:
        print(f"--- server log {navi.url} ---\n{navi.log()[-4000:]}")


def message(content: str) -> str:
    return json.dumps({"type": "message", "content": content})


async def wait_seconds_since(t0: float, ws) -> tuple[list[dict], float]:
    frames = await recv_until(ws, lambda f: f["type"] == "stream_stopped", timeout=10)
    return frames, (time.monotonic() - t0) * 1000


# --- two workers, one Redis ---------------------------------------------------------------------
async def test_join_on_other_worker_gets_replay_and_live_exactly_once_then_stop_there(workers, llm) -> None:
    a, b = workers
    llm.add_rule(Rule(match="tell the story", turns=[Turn(content=STORY, chunk_size=4, delay=0.01)]))
    llm.add_rule(Rule(match="ramble on", turns=[Turn(content=LONG, chunk_size=3, delay=0.03)]))
    sid = await asyncio.to_thread(a.create_session)

    async with connect(a, sid) as ws_a:
        await ws_a.send(message("tell the story"))
        await recv_until(ws_a, lambda f: is_delta(f) and f["seq"] >= 15)
        async with connect(b, sid) as ws_b:  # joins worker B mid-stream
            frames_b = await recv_run(ws_b)
        assert frames_b[-1]["type"] == "stream_end", frames_b[-1]
        assert deltas(frames_b) == STORY
        assert_contiguous(frames_b, first=1)
        run_id = frames_b[0]["run_id"]
        rest_a = await recv_run(ws_a)
        assert rest_a[-1]["type"] == "stream_end" and rest_a[-1]["run_id"] == run_id

        # Second run, started on A, refused on B while active, stopped through B's REST API.
        async with connect(b, sid) as ws_b:
            await ws_a.send(message("ramble on"))
            await recv_until(ws_b, lambda f: is_delta(f) and f["seq"] >= 5)
            await ws_b.send(message("me too"))
            refused = await recv_until(ws_b, lambda f: f["type"] == "error")
            assert "a run is already active" in refused[-1]["message"]
            assert "run_id" not in refused[-1]  # the socket's own error, not the run's
            response = await post(b, f"/sessions/{sid}/messages", {"content": "me too"})
            assert response.status_code == 409, response.text

            t0 = time.monotonic()
            response = await post(b, f"/sessions/{sid}/stop")
            assert response.json() == {"ok": True}
            (frames_b, ms_b), (frames_a, ms_a) = await asyncio.gather(
                wait_seconds_since(t0, ws_b), wait_seconds_since(t0, ws_a)
            )
        print(f"\nstop through worker B: stream_stopped on B after {ms_b:.0f} ms, on A after {ms_a:.0f} ms")
        assert await asyncio.to_thread(llm.wait_for_disconnect, 5), "the LLM stream was not closed on stop"

    rows = await asyncio.to_thread(assistant_rows, b, sid)
    assert [r["status"] for r in rows] == ["complete", "interrupted"]
    assert rows[0]["content"] == STORY
    assert rows[1]["content"] and LONG.startswith(rows[1]["content"])
    assert rows[1]["content"] == deltas(frames_b) or deltas(frames_b).endswith(rows[1]["content"][-10:])
    # The session is usable again from either worker.
    response = await post(b, f"/sessions/{sid}/messages", {"content": "hello again"})
    assert response.status_code == 200 and response.json()["content"] == "echo: hello again"


# --- one worker, in-memory layer ----------------------------------------------------------------
async def test_reconnect_with_after_seq_gets_exactly_the_rest(single, llm) -> None:
    llm.add_rule(Rule(match="tell the story", turns=[Turn(content=STORY, chunk_size=5, delay=0.01)]))
    sid = await asyncio.to_thread(single.create_session)
    async with connect(single, sid) as ws:
        await ws.send(message("tell the story"))
        head = await recv_until(ws, lambda f: is_delta(f) and f["seq"] >= 8)
    run_id, k = head[0]["run_id"], head[-1]["seq"]

    async with connect(single, sid, f"run_id={run_id}&after_seq={k}") as resumed, connect(single, sid) as fresh:
        tail, everything = await asyncio.gather(recv_run(resumed), recv_run(fresh))
    assert_contiguous(tail, first=k + 1)
    assert deltas(head) + deltas(tail) == STORY
    assert_contiguous(everything, first=1)
    assert deltas(everything) == STORY

    # After the end: a `resume` frame still gets what was missed, from the finished run's buffer.
    async with connect(single, sid) as late:
        await late.send(json.dumps({"type": "resume", "run_id": run_id, "after_seq": k}))
        again = await recv_run(late)
    assert again == tail


async def test_message_while_run_active_is_refused_and_nothing_is_lost(single, llm) -> None:
    llm.add_rule(Rule(match="tell the story", turns=[Turn(content=STORY, chunk_size=4, delay=0.01)]))
    sid = await asyncio.to_thread(single.create_session)
    async with connect(single, sid) as first, connect(single, sid) as second:
        await first.send(message("tell the story"))
        await recv_until(second, is_delta)
        await second.send(message("interrupting"))
        refused = await recv_until(second, lambda f: f["type"] == "error")
        assert "a run is already active" in refused[-1]["message"]
        response = await post(single, f"/sessions/{sid}/messages", {"content": "interrupting"})
        assert response.status_code == 409 and "already active" in response.json()["error"]
        frames = await recv_run(first)
    assert frames[-1]["type"] == "stream_end" and deltas(frames) == STORY
    detail_rows = await asyncio.to_thread(assistant_rows, single, sid)
    assert [(r["status"], r["content"]) for r in detail_rows] == [("complete", STORY)]


async def test_stop_frame_stops_run_and_closes_llm_stream(single, llm) -> None:
    llm.add_rule(Rule(match="ramble on", turns=[Turn(content=LONG, chunk_size=2, delay=0.03)]))
    sid = await asyncio.to_thread(single.create_session)
    async with connect(single, sid) as ws:
        await ws.send(message("ramble on"))
        head = await recv_until(ws, lambda f: is_delta(f) and f["seq"] >= 5)
        t0 = time.monotonic()
        await ws.send(json.dumps({"type": "stop"}))
        tail, ms = await wait_seconds_since(t0, ws)
        print(f"\nstop frame on a single worker: stream_stopped after {ms:.0f} ms")
        assert await asyncio.to_thread(llm.wait_for_disconnect, 5), "the LLM stream was not closed on stop"
        await ws.send(json.dumps({"type": "stop"}))
        assert (await recv_frame(ws))["message"] == "no active run to stop"
    rows = await asyncio.to_thread(assistant_rows, single, sid)
    assert [r["status"] for r in rows] == ["interrupted"]
    assert rows[0]["content"] == deltas(head + tail)
