"""Redis dies mid-stream and comes back: runs go on, sockets stay, nothing is lost.

Two real worker processes share one database and a real `redis-server`; four slow answers
stream (two owned by each worker) to sockets on both workers. Redis is killed with SIGKILL and
started again a few seconds later on the same port (no persistence: every group is gone). What
a user relies on:
- the runs go on and their answers are saved complete;
- open pages are told once that live updates paused, and once that they resumed; then get
  the frames they missed and the live ones, exactly once, in order, within 2 s;
- a page that reconnects with `run_id`/`after_seq` after the restart gets the rest within 2 s;
- while Redis is down a WebSocket handshake is a clear 503 (the page tries again), /health says
  `degraded` with the reason (anonymous callers: the word only), and `ok` again soon after;
- each worker logs the outage in one line and its end in one line: no traceback per frame.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
import pytest
import websockets

from tests import redis_server
from tests.live_server import LiveNavi
from tests.live_ws import assistant_rows, connect, recv_frame, recv_run, recv_until
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.live

CHUNKS = 60
STORY = "".join(f"<{k:02d} lorem ipsum> " for k in range(CHUNKS))  # 16 chars a chunk, 0.25 s apart: ~15 s
NAMES = ("alpha", "bravo", "charlie", "delta")
OUTAGE_S = 4.0
WITHIN_S = 2.0


@pytest.fixture
def redis():
    if not redis_server.available():
        pytest.skip("redis-server is not installed; `apt-get install redis-server` (.ci/run does this)")
    server = redis_server.RedisServer()
    with server:
        yield server


@pytest.fixture
def workers(redis, llm_live):
    env = {"REDIS_URL": redis.url, "OLLAMA_HOST": llm_live.url}
    with LiveNavi(env=env) as a, LiveNavi(env=env, data_dir=a.data_dir) as b:
        yield a, b
        for navi in (a, b):
            print(f"--- server log {navi.url} ---\n{navi.log()[-4000:]}")


def restart_on_same_port(old: redis_server.RedisServer) -> redis_server.RedisServer:
    fresh = redis_server.RedisServer()
    fresh.port = old.port
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


async def test_streams_survive_a_redis_restart(redis, workers, live_llm) -> None:
    a, b = workers
    for name in NAMES:
        live_llm.add_rule(Rule(match=f"the {name} story", turns=[Turn(content=STORY, chunk_size=16, delay=0.25)]))
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
                    assert "".join(f["delta"] for f in frames if f["type"] == "stream_delta") == STORY, (i, role)
                    assert frames[-1]["type"] == "stream_end"
            for sid in sessions:
                rows = await asyncio.to_thread(assistant_rows, a, sid)
                assert [(r["status"], r["content"]) for r in rows] == [("complete", STORY)]
            deadline = time.monotonic() + 10
            while health(a, signed_in=True)["channel_layer"] != "ok" and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert health(a, signed_in=True)["channel_layer"] == "ok"
            assert health(b, signed_in=False) == {"status": "ok"}
            for navi in (a, b):  # one line when it went, one when it came back; no traceback per frame
                log = navi.log()
                assert log.count("channel layer down") == 1 and log.count("channel layer back") == 1, log[-3000:]
                assert "Traceback" not in log, log[-3000:]
        finally:
            back.stop()
            redis.proc = None  # stopped above; its fixture only removes its folder
    finally:
        for sockets in socks.values():
            for ws in sockets.values():
                await ws.close()
