"""navi_project.redis_layer against a real redis-server that is killed and started again: while
it is down the layer refuses at once (no traceback per frame, one log line), its listeners hear
`layer.down` once and wait instead of failing; when Redis is back the groups this process had
joined are joined again, listeners hear `layer.up`, and a group message reaches them again."""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import time

import pytest

from navi_project.redis_layer import LayerUnavailable, NaviRedisChannelLayer
from tests import redis_server

TIMEOUT = 10


@pytest.fixture
def redis():
    if not redis_server.available():
        pytest.skip("redis-server is not installed; `apt-get install redis-server` (.ci/run does this)")
    with redis_server.RedisServer() as server:
        yield server


def restart(old: redis_server.RedisServer) -> None:
    fresh = redis_server.RedisServer()
    shutil.rmtree(fresh.dir, ignore_errors=True)
    fresh.port, fresh.dir = old.port, old.dir
    old.proc = fresh.start().proc  # the fixture stops it


async def test_an_outage_is_waited_out_and_the_groups_come_back(redis, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="navi_project.redis_layer")
    layer = NaviRedisChannelLayer(hosts=[{"address": redis.url}], capacity=100)
    listener, left = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("session.one", listener)
    await layer.group_add("session.one", left)
    await layer.group_send("session.one", {"type": "run.event", "n": 1})
    assert (await asyncio.wait_for(layer.receive(listener), TIMEOUT))["n"] == 1
    assert (await asyncio.wait_for(layer.receive(left), TIMEOUT))["n"] == 1

    waiting = asyncio.create_task(layer.receive(listener))
    await asyncio.sleep(0.2)  # it is blocked in Redis now (BZPOPMIN), not waiting on a flag
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait(timeout=TIMEOUT)
    assert await asyncio.wait_for(waiting, TIMEOUT) == {"type": "layer.down"}
    started = time.monotonic()
    for n in range(200):  # a stream's frames while Redis is gone: refused at once, one line logged
        with pytest.raises(LayerUnavailable):
            await layer.group_send("session.one", {"type": "run.event", "n": n})
    assert time.monotonic() - started < 1.0
    assert layer.outage() and "Redis unreachable" in layer.outage()
    await layer.group_discard("session.one", left)  # a socket closing meanwhile: no error

    waiting = asyncio.create_task(layer.receive(listener))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # it waits for Redis instead of failing
    restart(redis)
    assert await asyncio.wait_for(waiting, TIMEOUT) == {"type": "layer.up"}
    assert layer.outage() is None
    # The restarted Redis had no groups: the membership was added again, the one left is not.
    await layer.group_send("session.one", {"type": "run.event", "n": "after"})
    assert (await asyncio.wait_for(layer.receive(listener), TIMEOUT))["n"] == "after"
    assert await layer.group_size("session.one") == 1
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[0].startswith("channel layer down") and lines[1].startswith("channel layer back")
    await layer.close_pools()
