"""Whether a fact found by meaning is related to the query, by a rule that holds across
embedding models.

A fixed cosine threshold does not carry from one model to another: all-MiniLM-L6-v2 gives
"coffee" against "morning drink: espresso" 0.46 and unrelated pairs about 0.05, while
multilingual-e5-small gives the same pair 0.86 and unrelated pairs about 0.78. So each
similarity is read against the query's own similarities to REFERENCE_TEXTS — everyday
sentences about nothing in particular, embedded once per model — as a robust z-score (how many
spreads above the median of those). A fact counts when its score is at least MIN_Z, and at
least RELATIVE of the query's best fact's score (the weak tail of a strong match is left out),
and the fact is nearer the query than every reference text is.
bench/fact_vectors.py measures the rule on two real models' vectors (tests/data/fact_vectors.json).

Plain Python, no Django: the bench imports it to embed the same reference texts.
"""

from __future__ import annotations

import math
import statistics

# Unrelated to each other and to any one subject a user keeps facts about; short and long,
# as queries are.
REFERENCE_TEXTS = (
    "The train leaves from platform four.",
    "Photosynthesis turns light into sugar.",
    "The invoice is overdue by two weeks.",
    "She painted the fence blue last summer.",
    "Quarterly revenue rose by three percent.",
    "The recipe needs two eggs and flour.",
    "A volcano erupted on the island.",
    "Install the package with pip.",
    "The museum closes at six on Mondays.",
    "He broke his wrist skiing.",
    "The senate passed the budget bill.",
    "Whales migrate thousands of kilometres.",
    "The meeting moved to Thursday.",
    "Knit two, purl two, repeat.",
    "The telescope found a new comet.",
    "umbrella",
    "algebra homework",
    "a red bicycle",
    "medieval castles",
    "printer out of toner",
    "jazz concert tickets",
    "how tall is the tower",
    "gardening gloves",
    "the chess tournament",
)
MIN_Z = 3.0  # robust z-score a fact needs at least (bench/fact_vectors.py: related 3.3 and up, unrelated at most 2.9)
RELATIVE = 0.5  # and this share of the best fact's z-score (the weak tail of a strong match is left out)
SPREAD_FLOOR = 0.01  # a spread at least this: a model whose reference similarities hardly vary (a toy one) is not divided by ~0


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def baseline(query: list[float], references: list[list[float]]) -> tuple[float, float, float]:
    """(median, spread, highest) of the query's similarities to the reference texts: the spread
    is the median absolute deviation scaled to a standard deviation, so one reference that
    happens to be near the query does not move it."""
    sims = [_cosine(query, r) for r in references]
    centre = statistics.median(sims)
    spread = 1.4826 * statistics.median(abs(s - centre) for s in sims)
    return centre, max(spread, SPREAD_FLOOR), max(sims)


def related(found: list[tuple[int, float]], query: list[float], references: list[list[float]]) -> list[int]:
    """The ids of `found` ((id, cosine similarity to the query), nearest first) that are
    related to the query by the rule above, in the same order."""
    if not found or not references:
        return []
    centre, spread, highest = baseline(query, references)
    scores = [(i, similarity, (similarity - centre) / spread) for i, similarity in found]
    bar = max(MIN_Z, RELATIVE * max(z for _, _, z in scores))
    return [i for i, similarity, z in scores if z >= bar and similarity > highest]
