"""Benchmark: `GET /sessions?q=` over 10 000 chats / 500 000 messages → p50/p95 ms.

One user owns every chat (the worst case for that user's searches); messages are 6–30 words
drawn from a 30 000-word vocabulary with a Zipf-like frequency, so some words are common and
most are rare, as in real chats. Queries are 1–2 words drawn from the same distribution; the
slowest case (the most common word of all) is timed separately.

Run: .venv/bin/python bench/chat_search.py   (temp SQLite DB; prints figures, asserts nothing)
"""

from __future__ import annotations

import itertools
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import setup  # noqa: E402

setup()

SESSIONS = 10_000
MESSAGES = 500_000
QUERIES = 200
VOCAB = 30_000


def main() -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction
    from django.test import Client

    from agent.models import Profile
    from sessions_app.models import Message, Session

    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = list({"".join(rng.choice(letters) for _ in range(rng.randint(3, 10))) for _ in range(VOCAB)})
    weights = list(itertools.accumulate(1 / (rank + 10) for rank in range(len(vocab))))  # Zipf-like
    words = lambda n: rng.choices(vocab, cum_weights=weights, k=n)  # noqa: E731

    user = get_user_model().objects.create_user("bench", password="bench")
    other = get_user_model().objects.create_user("other")
    profile = Profile.objects.order_by("id").first()
    started = time.perf_counter()
    per_session = MESSAGES // SESSIONS
    with transaction.atomic():
        sessions = [
            Session(owner=user if i % 10 else other, profile=profile, title=" ".join(words(rng.randint(2, 5))))
            for i in range(SESSIONS)
        ]
        Session.objects.bulk_create(sessions, batch_size=2000)
        batch = []
        for s in sessions:
            for seq in range(1, per_session + 1):
                batch.append(
                    Message(
                        session=s,
                        seq=seq,
                        role="user" if seq % 2 else "assistant",
                        content=" ".join(words(rng.randint(6, 30))),
                    )
                )
            if len(batch) >= 10_000:
                Message.objects.bulk_create(batch)
                batch = []
        Message.objects.bulk_create(batch)
    print(
        f"inserted {SESSIONS} sessions / {MESSAGES} messages (index kept by triggers) in "
        f"{time.perf_counter() - started:.0f} s"
    )
    with connection.cursor() as cur:
        cur.execute("ANALYZE")

    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    queries = [" ".join(words(rng.randint(1, 2))) for _ in range(QUERIES)]

    def timed(q: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        response = client.get("/sessions", {"q": q})
        elapsed = (time.perf_counter() - t0) * 1000
        assert response.status_code == 200, response.content[:300]
        return elapsed, len(response.json()["sessions"])

    timed("warm up")
    timings, hits = [], 0
    for q in queries:
        ms, n = timed(q)
        timings.append(ms)
        hits += n
    timings.sort()
    p50 = statistics.median(timings)
    p95 = timings[int(len(timings) * 0.95) - 1]
    print(
        f"chat_search: {QUERIES} queries: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {timings[-1]:.1f} ms, "
        f"{hits / QUERIES:.1f} results/query (target p50 <= 50 ms)"
    )
    rare = [timed(w)[0] for w in vocab[-50:]]
    common_ms, _ = timed(vocab[0])
    print(f"rare word p50 {statistics.median(rare):.1f} ms; the most common word ({vocab[0]!r}) {common_ms:.0f} ms")


if __name__ == "__main__":
    main()
