"""Kill -9 a real server mid-answer and start it again: nothing the user saw is lost.

The loop flushes the streaming answer as a `partial` row; after a crash the restarted server
marks it `interrupted` (text kept) and voids the dead run's claim, so the session is usable at
once (no 409 "a run is already active" until some timeout).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.live_server import LiveNavi
from tests.live_ws import assistant_rows, connect, planning_rule, post, recv_until
from tests.llm_server import Rule, Turn

pytestmark = pytest.mark.live

ANSWER = "".join(f"word{i:03d} " for i in range(150))  # ~1 200 chars at 2 chars / 40 ms: ~24 s


async def _wait_for_partial(navi: LiveNavi, session_id: str, timeout: float = 15) -> dict:
    """Poll the REST API (the observable state) until the answer is flushed as `partial`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = await asyncio.to_thread(assistant_rows, navi, session_id)
        if rows and rows[-1]["status"] == "partial" and rows[-1]["content"]:
            return rows[-1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"no partial assistant row within {timeout}s:\n{navi.log()[-2000:]}")


async def test_kill_and_restart_marks_partial_interrupted_and_session_usable(llm) -> None:
    llm.add_rule(planning_rule())
    llm.add_rule(Rule(match="tell me a long story", turns=[Turn(content=ANSWER, chunk_size=2, delay=0.04)]))
    navi = LiveNavi(env={"OLLAMA_HOST": llm.url})
    with navi:
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
