"""Presence across workers: two real server processes on one Redis channel layer. A tab open on
worker B keeps a run on worker A from pushing; with no tab anywhere, A pushes."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests import redis_server
from tests.live_server import LiveNavi
from tests.live_ws import connect, post
from tests.llm_server import Rule, Turn
from tests.notify_services import PushService

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def redis():
    if not redis_server.available():
        pytest.skip("redis-server is not installed; `apt-get install redis-server` (.ci/run does this)")
    with redis_server.RedisServer() as server:
        yield server


@pytest.fixture(scope="module")
def push():
    with PushService() as service:
        yield service


@pytest.fixture(scope="module")
def workers(redis, llm_live, push):
    env = {
        "REDIS_URL": redis.url,
        "OLLAMA_HOST": llm_live.url,
        "NOTIFY_ALLOW_HTTP_PUSH": "true",
        "LOG_LEVEL": "INFO",  # the notification decisions are INFO lines
        "HTTP_ALLOWED_HOSTS": f"127.0.0.1:{push.port}",
    }
    with LiveNavi(env=env) as a, LiveNavi(env=env, data_dir=a.data_dir) as b:
        yield a, b


async def test_a_tab_on_another_worker_counts_as_watching(workers, live_llm, push):
    a, b = workers
    key = httpx.get(f"{a.url}/settings/notify", headers=a.headers, timeout=10).json()["vapid_public_key"]
    phone = push.subscribe(key)
    created = await post(a, "/settings/notify", {"kind": "webpush", "subscription": phone.subscription()})
    assert created.status_code == 201, created.text
    live_llm.add_rule(Rule(match="first", turns=[Turn(content="Answer one, seen in the tab.")]))
    live_llm.add_rule(Rule(match="second", turns=[Turn(content="Answer two, nobody looking.")]))
    sid = await asyncio.to_thread(a.create_session)

    async with connect(b, sid):  # the chat is open in a tab served by worker B
        response = await post(a, f"/sessions/{sid}/messages", {"content": "first"})
        assert response.status_code == 200, response.text
        await _wait_for_log(a, f"chat {sid}: 'Navi answered' not notified: a tab shows the chat")
    response = await post(a, f"/sessions/{sid}/messages", {"content": "second"})
    assert response.status_code == 200, response.text
    received = await asyncio.to_thread(push.wait_for, 1)
    assert [r["payload"]["body"] for r in received] == ["Answer two, nobody looking."]
    assert received[0]["payload"]["url"] == f"/#{sid}"
    await _wait_for_log(a, f"chat {sid}: 'Navi answered' notified to 1 of 1 targets")


async def _wait_for_log(navi: LiveNavi, line: str, timeout: float = 15) -> None:
    """Poll the server's log (its observable decision) until `line` appears."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if line in navi.log():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {line!r} in the log within {timeout}s:\n{navi.log()[-3000:]}")
