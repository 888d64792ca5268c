"""Live runs across real server processes: replay + live frames exactly once, stop from any
worker, reconnect with `after_seq`, one run per session, streams that survive a Redis restart.

Two daphne processes share one SQLite database and a real redis-server (channels_redis); a
third runs alone on the in-memory layer. The LLM is the protocol-level test server with slow,
paced turns so that sockets can join mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time

import httpx
import pytest
import websockets

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


# --- Redis dies mid-stream and comes back ------------------------------------------------------
# Four slow answers stream (two owned by each worker) to sockets on both workers; Redis is killed
# with SIGKILL and started again a few seconds later on the same port (no persistence: every group
# is gone). The runs go on and are saved complete; open pages hear once that live updates paused
# and once that they resumed, then get what they missed and the live frames, exactly once, in
# order, within 2 s; a page reconnecting with run_id/after_seq gets the rest within 2 s; while
# Redis is down a handshake is a 503 and /health is degraded (the word only for anonymous
# callers); each worker logs the outage in one line and its end in one line.

RESTART_CHUNKS = 60
# 16 characters a chunk, 0.25 s apart: ~15 s, streaming on across the outage.
RESTART_STORY = "".join(f"<{k:02d} lorem ipsum> " for k in range(RESTART_CHUNKS))
NAMES = ("alpha", "bravo", "charlie", "delta")
OUTAGE_S = 4.0
WITHIN_S = 2.0


def restart_on_same_port(old: redis_server.RedisServer) -> redis_server.RedisServer:
    """A new redis-server where the killed one was: same port, same (empty) folder."""
    fresh = redis_server.RedisServer()
    shutil.rmtree(fresh.dir, ignore_errors=True)
    fresh.port, fresh.dir = old.port, old.dir
    return fresh.start()


def run_frames(frames: list[dict]) -> list[dict]:
    return [f for f in frames if "seq" in f]


async def silent(ws, seconds: float) -> bool:
    try:
        await recv_frame(ws, seconds)
    except TimeoutError:
        return True
    return False


def health(navi: LiveNavi, signed_in: bool) -> dict:
    return httpx.get(f"{navi.url}/health", headers=navi.headers if signed_in else {}, timeout=10).json()


async def test_streams_survive_a_redis_restart(redis, workers, llm) -> None:
    """Last in this module: its workers and Redis serve the tests above first."""
    a, b = workers
    logs_from = {navi.port: len(navi.log()) for navi in workers}
    for name in NAMES:
        llm.add_rule(Rule(match=f"the {name} story", turns=[Turn(content=RESTART_STORY, chunk_size=16, delay=0.25)]))
    sessions = [await asyncio.to_thread(a.create_session) for _ in NAMES]
    owners = [a, b, a, b]  # the worker whose socket starts the run owns it
    others = [b, a, b, a]
    socks = {}
    for i, sid in enumerate(sessions):
        socks[i] = {
            "owner": await connect(owners[i], sid).__aenter__(),
            "stayer": await connect(others[i], sid).__aenter__(),  # the other worker: frames cross Redis
            "leaver": await connect(others[i], sid).__aenter__(),
        }
    seen: dict[tuple[int, str], list[dict]] = {(i, role): [] for i in socks for role in socks[i]}
    try:
        for i, name in enumerate(NAMES):
            await socks[i]["owner"].send(json.dumps({"type": "message", "content": f"tell the {name} story"}))
        for i in socks:
            for role in socks[i]:
                seen[i, role] += await recv_until(socks[i][role], lambda f: f["type"] == "stream_delta" and f["seq"] >= 4, 60)
        # The leavers go away before the outage; they come back after it with where they were.
        left_at = {}
        for i in socks:
            await socks[i].pop("leaver").close()
            last = run_frames(seen[i, "leaver"])[-1]
            left_at[i] = (last["run_id"], last["seq"])

        redis.proc.send_signal(signal.SIGKILL)
        redis.proc.wait(timeout=10)
        killed = time.monotonic()
        for i in socks:  # every open page hears once that live updates paused
            for role in socks[i]:
                frames = await recv_until(socks[i][role], lambda f: f["type"] == "live_paused", 10)
                seen[i, role] += frames[:-1]
        with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
            async with connect(a, sessions[0]):
                pass
        assert refused.value.response.status_code == 503
        assert health(b, signed_in=False) == {"status": "degraded"}
        detail = health(a, signed_in=True)
        assert detail["status"] == "degraded" and detail["channel_layer"].startswith("error: Redis unreachable"), detail
        quiet = await asyncio.gather(*(silent(ws, 1.0) for sockets in socks.values() for ws in sockets.values()))
        assert all(quiet), "a frame went out while Redis was down"

        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - killed)))  # the outage itself, not a sync
        back = restart_on_same_port(redis)
        restarted = time.monotonic()
        try:
            delays = []
            for i in socks:  # open pages: resumed, then the missed frames and the live ones
                for role in socks[i]:
                    frames = await recv_until(socks[i][role], lambda f: f["type"] == "stream_delta", 30)
                    delays.append(time.monotonic() - restarted)
                    assert [f["type"] for f in frames if "seq" not in f] == ["live_resumed"], frames
                    seen[i, role] += [f for f in frames if "seq" in f]
            replays = []
            for i in socks:  # pages that come back after the restart
                run_id, after = left_at[i]
                started = time.monotonic()
                socks[i]["leaver"] = await connect(others[i], sessions[i], f"run_id={run_id}&after_seq={after}").__aenter__()
                first = await recv_frame(socks[i]["leaver"], 30)
                replays.append(time.monotonic() - started)
                assert first["run_id"] == run_id and first["seq"] == after + 1, first
                seen[i, "leaver"].append(first)
            print(f"\nfirst frame after the restart: {max(delays):.2f} s at most; reconnect to replay: {max(replays):.2f} s")
            assert max(delays) < WITHIN_S and max(replays) < WITHIN_S

            for i in socks:  # to the end: every socket has the whole answer, each frame once, in order
                for role in socks[i]:
                    seen[i, role] += await recv_run(socks[i][role], 60)
                    frames = run_frames(seen[i, role])
                    assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1)), (i, role)
                    assert "".join(f["delta"] for f in frames if f["type"] == "stream_delta") == RESTART_STORY, (i, role)
                    assert frames[-1]["type"] == "stream_end"
            for sid in sessions:
                rows = await asyncio.to_thread(assistant_rows, a, sid)
                assert [(r["status"], r["content"]) for r in rows] == [("complete", RESTART_STORY)]
            deadline = time.monotonic() + 10
            while health(a, signed_in=True)["channel_layer"] != "ok" and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert health(a, signed_in=True)["channel_layer"] == "ok"
            assert health(b, signed_in=False) == {"status": "ok"}
            for navi in (a, b):  # one line when it went, one when it came back; no traceback per frame
                log = navi.log()[logs_from[navi.port]:]
                assert log.count("channel layer down") == 1 and log.count("channel layer back") == 1, log[-3000:]
                assert "Traceback" not in log, log[-3000:]
        finally:
            redis.proc = back.proc  # the module's fixture stops it
    finally:
        for sockets in socks.values():
            for ws in sockets.values():
                await ws.close()
