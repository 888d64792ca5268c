"""Benchmark: compressing a 500-turn context with the test LLM server → ms spent outside the
LLM call (partitioning, formatting, DB updates), measured through the real CompressionWorker.

Run: .venv/bin/python bench/compression.py   (temp SQLite DB; prints figures, asserts nothing)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import setup  # noqa: E402

setup()

TURNS = 500
REPEATS = 5


class TimedBackend:
    """Wraps a backend and accumulates the time spent inside complete()."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.llm_ms = 0.0

    async def complete(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return await self.inner.complete(*args, **kwargs)
        finally:
            self.llm_ms += (time.perf_counter() - t0) * 1000


def _make_session(user):
    from sessions_app.models import Message, Session

    session = Session.objects.create(owner=user, profile_id="secretary", context_token_count=10**9)
    rows, seq = [], 0
    for i in range(TURNS):
        turn = [
            dict(role="user", content=f"question {i}: please check the server logs " * 3),
            dict(role="assistant", tool_calls=[{"id": f"c{i}", "name": "shell", "arguments": {"cmd": "journalctl -n 200 " * 10}}]),
            dict(role="tool", content="log line " * 200, tool_call_id=f"c{i}", name="shell"),
            dict(role="assistant", content=f"answer {i}: everything looks fine " * 5),
        ]
        for fields in turn:
            seq += 1
            rows.append(Message(session=session, seq=seq, **fields))
    Message.objects.bulk_create(rows, batch_size=2000)
    return session


async def _compress_once(session_id: str, backend) -> tuple[float, float, int, int]:
    from agent.context.conversation import DBConversation
    from agent.models import Profile
    from agent.turn.compression import CompressionWorker
    from agent.turn.workers import WorkerContext

    conv = await DBConversation.open(session_id)
    profile = await Profile.objects.aget(pk="secretary")
    timed = TimedBackend(backend)
    ctx = WorkerContext(conv, profile, timed, token_count=10**9, max_tokens=1000, phase="post")
    t0 = time.perf_counter()
    result = await CompressionWorker().run(ctx)
    total = (time.perf_counter() - t0) * 1000
    event = result.events[0]
    return total, timed.llm_ms, event.messages_before, event.messages_after


def main() -> None:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from agent.llm.ollama_backend import OllamaBackend
    from tests.llm_server import LLMServer, Turn

    server = LLMServer().start()
    settings.OLLAMA_HOST = server.url
    try:
        user = get_user_model().objects.create_user("bench")
        outside, llm = [], []
        for _ in range(REPEATS):
            server.script(Turn(content="- the user asked about server logs; all fine", chunk_size=0))
            session = _make_session(user)
            total, llm_ms, before, after = asyncio.run(_compress_once(str(session.pk), OllamaBackend()))
            outside.append(total - llm_ms)
            llm.append(llm_ms)
        print(f"compression: {TURNS}-turn context ({before} messages → {after}): "
              f"median {statistics.median(outside):.1f} ms outside the LLM call "
              f"(LLM call {statistics.median(llm):.1f} ms; {REPEATS} runs)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
