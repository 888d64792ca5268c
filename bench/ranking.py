"""Benchmark for tuning knowledge search's fusion (knowledge_app.search): file recall@1/@5 and
MRR@10 of words alone, vectors alone, plain reciprocal rank fusion and the weighted fusion, split
by question kind — the paraphrased questions of bench/data/knowledge_questions.json and the
literal ones below (a name, a code-like token or a quoted phrase the page has). This set is the
one the weights were tuned on; report figures on a held-out set, not on this one.

    DATABASE_URL=sqlite:////tmp/kb.db PYTHONPATH=/tmp/benchlib .venv/bin/python bench/knowledge.py quality
    KNOWLEDGE_BENCH_DB=/tmp/kb.db PYTHONPATH=/tmp/benchlib .venv/bin/python bench/ranking.py

The first command indexes python3-doc's HTML with all-MiniLM-L6-v2 (see bench/knowledge.py);
this one reuses that database. Each question's word and vector lists are fetched once, then
every fusion is computed from them, so a variant costs no search.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

# The pages of python3-doc's tutorial/howto/faq that have each name (grep), written down before any
# fusion was measured on them.
LITERAL = [
    ("__slots__", ["howto/descriptor.html"]),
    ("functools.cmp_to_key", ["howto/sorting.html"]),
    ("logging.basicConfig level DEBUG", ["howto/logging.html", "howto/logging-cookbook.html"]),
    ("argparse add_argument action store_true", ["howto/argparse.html"]),
    ("re.VERBOSE flag", ["howto/regex.html"]),
    ("if __name__ == \"__main__\"", ["tutorial/modules.html"]),
    ("PYTHONSTARTUP", ["tutorial/appendix.html"]),
    ("urllib.request.urlopen", ["howto/urllib2.html"]),
    ("\"list comprehension\"", ["tutorial/datastructures.html"]),
    ("sys.getrefcount", ["tutorial/modules.html"]),
    ("Py_INCREF", ["faq/windows.html"]),
    ("curses.wrapper", ["howto/curses.html"]),
    ("ipaddress.ip_network", ["howto/ipaddress.html"]),
    ("enum.Flag", ["howto/enum.html"]),
    ("__set_name__", ["howto/descriptor.html"]),
    ("operator.itemgetter sort", ["howto/sorting.html"]),
]

def collect() -> list[tuple]:
    """Each question's (query, relevant, kind, word list, vector list, exact list, passage -> file)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from _minilm import MiniLM
    from knowledge import django_setup, serve

    model = MiniLM()
    url = serve(lambda texts: model.embed(texts).tolist())
    os.environ["DATABASE_URL"] = f"sqlite:///{os.environ['KNOWLEDGE_BENCH_DB']}"
    django_setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from knowledge_app import search, words
    from knowledge_app.models import Passage

    settings.OLLAMA_HOST, settings.EMBEDDING_MODEL = url, "all-minilm-l6-v2"
    spec = json.loads((HERE / "data" / "knowledge_questions.json").read_text())
    user = get_user_model().objects.get(username="reader")
    names = dict(Passage.objects.values_list("pk", "document__name"))
    texts = dict(Passage.objects.values_list("pk", "text"))
    asked = [(q["q"], q["relevant"], "paraphrased") for q in spec["questions"]]
    asked += [(q, relevant, "literal") for q, relevant in LITERAL]
    lists = []
    for query, relevant, kind in asked:
        by_words = words.ranked(user.pk, query, search.CANDIDATES)
        by_meaning = search.meaning(user.pk, "passage", query, search.CANDIDATES)
        tokens = search.exact_tokens(query)
        exact = [i for i, _ in by_words if tokens and search._has_all(texts.get(i, ""), tokens)]
        lists.append((query, relevant, kind, by_words, by_meaning, exact, names))
    return lists


def evaluate(lists: list[tuple], fusion, kind: str) -> tuple[float, float, float]:
    """(file r@1, r@5, MRR@10) of `fusion(query, words, vectors, exact) -> ids` on one kind ("all": every one)."""
    r1, r5, rr = [], [], []
    for query, relevant, k, w, m, e, names in lists:
        if kind != "all" and k != kind:
            continue
        files = []
        for i in fusion(query, w, m, e):
            if names.get(i) and names[i] not in files:
                files.append(names[i])
        ranks = [n for n, f in enumerate(files[:10], start=1) if any(f.startswith(r) for r in relevant)]
        r1.append(1.0 if ranks and ranks[0] == 1 else 0.0)
        r5.append(1.0 if ranks and ranks[0] <= 5 else 0.0)
        rr.append(1.0 / ranks[0] if ranks else 0.0)
    return statistics.mean(r1), statistics.mean(r5), statistics.mean(rr)


def main() -> None:
    lists = collect()
    from knowledge_app import search

    variants = {
        "words": lambda q, w, m, e: [i for i, _ in w],
        "vectors": lambda q, w, m, e: [i for i, _ in m],
        "plain RRF (before)": lambda q, w, m, e: [i for i, _ in search.fuse([i for i, _ in w], [i for i, _ in m], e)],
        "weighted (now)": lambda q, w, m, e: [i for i, _ in search.weighted_fuse(q, w, m, e)],
    }
    print(f"{sum(1 for x in lists if x[2] == 'paraphrased')} paraphrased, {len(LITERAL)} literal questions")
    print("| fusion | kind | file r@1 | file r@5 | MRR@10 |\n|---|---|---|---|---|")
    for name, fusion in variants.items():
        for kind in ("paraphrased", "literal", "all"):
            r1, r5, mrr = evaluate(lists, fusion, kind)
            print(f"| {name} | {kind} | {r1:.3f} | {r5:.3f} | {mrr:.3f} |")


if __name__ == "__main__":
    main()
