"""Benchmark: ranked memory search over 100 000 facts → p50/p95/p99/max ms, for 200 random
queries of 1–3 vocabulary words, and for 90 short or common ones (1–3-letter prefixes of
vocabulary words, category names) where a match set can be a quarter of all facts.

Run: .venv/bin/python bench/memory_search.py   (temp SQLite DB; prints figures, asserts nothing)
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import setup  # noqa: E402

setup()

FACTS = 100_000
QUERIES = 200


def main() -> None:
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from memory_app.models import MemoryFact
    from memory_app.search import search_facts

    rng = random.Random(42)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9))) for _ in range(20_000)]
    categories = ["personal", "preferences", "projects", "environment", "people", "routines", "work", "health"]
    user = get_user_model().objects.create_user("bench")
    started = time.perf_counter()
    with transaction.atomic():
        batch = []
        for i in range(FACTS):
            batch.append(MemoryFact(
                owner=user, category=rng.choice(categories), key=f"{rng.choice(vocab)} {i}",
                value=" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 12))),
            ))
            if len(batch) == 5000:
                MemoryFact.objects.bulk_create(batch)
                batch = []
        MemoryFact.objects.bulk_create(batch)
    print(f"inserted {FACTS} facts in {time.perf_counter() - started:.1f} s")
    queries = [" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 3))) for _ in range(QUERIES)]
    common = [w[:n] for w in rng.sample(vocab, 28) for n in (1, 2, 3)] + categories[:6]
    search_facts(user.id, "warm up")
    for name, batch in (("random words", queries), ("short or common", common)):
        timings, hits = [], 0
        for q in batch:
            t0 = time.perf_counter()
            hits += len(search_facts(user.id, q))
            timings.append((time.perf_counter() - t0) * 1000)
        timings.sort()
        p50 = statistics.median(timings)
        p95, p99 = (timings[max(0, round(len(timings) * q) - 1)] for q in (0.95, 0.99))
        print(f"memory_search, {name}: {len(batch)} queries over {FACTS} facts: p50 {p50:.2f} ms, p95 {p95:.2f} ms, "
              f"p99 {p99:.2f} ms, max {timings[-1]:.2f} ms, {hits / len(batch):.1f} results/query (target p99 <= 20 ms)")


if __name__ == "__main__":
    main()
