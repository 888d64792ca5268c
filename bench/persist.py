"""Benchmark: time to save one turn (user row + assistant row, as the loop does) when the
session already holds 10, 1 000 and 10 000 messages.

Run: .venv/bin/python bench/persist.py   (temp SQLite DB; prints figures, asserts nothing)
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

SIZES = (10, 1_000, 10_000)
REPEATS = 50


def _make_session(user, existing: int):
    from sessions_app.models import Message, Session

    session = Session.objects.create(owner=user, profile_id="secretary", title="bench")
    Message.objects.bulk_create(
        [Message(session=session, seq=i + 1, role="user" if i % 2 == 0 else "assistant", content=f"message {i} " * 20)
         for i in range(existing)],
        batch_size=2000,
    )
    return session


async def _save_turns(session_id: str) -> list[float]:
    from agent.context.conversation import DBConversation
    from agent.llm.messages import ChatMessage

    conv = await DBConversation.open(session_id)
    timings = []
    for i in range(REPEATS):
        t0 = time.perf_counter()
        await conv.add(ChatMessage(role="user", content=f"question {i}"))
        await conv.add(ChatMessage(role="assistant", content=f"answer {i} " * 50))
        await conv.set_token_count(1000 + i)
        timings.append((time.perf_counter() - t0) * 1000)
    return timings


def main() -> None:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user("bench")
    asyncio.run(_save_turns(str(_make_session(user, 10).pk)))  # warm-up: connections, thread pool, caches
    results = {}
    for size in SIZES:
        session = _make_session(user, size)
        timings = asyncio.run(_save_turns(str(session.pk)))
        results[size] = statistics.median(timings)
        print(f"persist: save one turn at {size:>6} existing messages: median {results[size]:.2f} ms "
              f"(p95 {sorted(timings)[int(REPEATS * 0.95) - 1]:.2f} ms, {REPEATS} turns)")
    ratio = results[SIZES[-1]] / results[SIZES[0]]
    print(f"persist: {SIZES[-1]} / {SIZES[0]} ratio {ratio:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
