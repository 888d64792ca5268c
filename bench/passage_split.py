"""Benchmark: how often the passage that holds the answer is found, for a passage size and
overlap (issue #54: the figures that chose chunker.PASSAGE_CHARS and OVERLAP).

    PYTHONPATH=/tmp/benchlib .venv/bin/python bench/passage_split.py [ROOT] [LABEL]
    CHARS=700 OVERLAP=150 PYTHONPATH=/tmp/benchlib .venv/bin/python bench/passage_split.py . small

Corpus: the pages of Debian's python3-doc (/usr/share/doc/python3.11/html) that
bench/data/knowledge_questions.json names for the questions below, plus every faq/ page.
ANSWERS: for 30 of those questions, words the answering passage holds (found by reading the
pages, before any run). A question counts at k when one of the first k passages is in a relevant
page and holds its answer words. Vectors: all-MiniLM-L6-v2 with numpy (bench/_minilm.py, the
bench-only packages of bench/knowledge.py), each passage embedded as the indexer embeds it
(chunker.embedding_text: title and section path, then the text); words: SQLite FTS5 bm25 over
text and section; hybrid: reciprocal rank fusion (k 60) of the two lists' first 50. ROOT may be
another checkout (an older splitter: passages embedded as their text). Embeddings are cached in
/tmp/k1m/cache.json by text.

Figures (2026-12-07, a shared 2-core machine; r@1 / r@5 of the answering passage, 30 questions:
one question is 0.03):

| splitter | passages (< 60 chars) | vectors | words | hybrid |
|---|---|---|---|---|
| before issue #54 (no overlap, 1 000–1 600) | 1159 (201) | 0.43 / 0.70 | 0.33 / 0.50 | 0.47 / 0.70 |
| 700 / overlap 150 | 1386 (0) | 0.37 / 0.67 | 0.33 / 0.50 | 0.40 / 0.60 |
| 1 000 / 0 | 981 (0) | 0.47 / 0.77 | 0.40 / 0.57 | 0.47 / 0.70 |
| 1 000 / 100 | 996 (0) | 0.43 / 0.73 | 0.37 / 0.57 | 0.47 / 0.70 |
| **1 000 / 200 (chosen)** | 1026 (0) | 0.47 / 0.70 | 0.30 / 0.60 | 0.50 / 0.70 |
| 1 200 / 100 | 884 (0) | 0.50 / 0.70 | 0.37 / 0.60 | 0.60 / 0.67 |
| 1 200 / 200 | 897 (0) | 0.43 / 0.77 | 0.33 / 0.57 | 0.57 / 0.70 |

Python's HTML pages had headings before too, so the gain here is small; reST read as plain text
(Django's docs) had no sections at all before.
"""
# ruff: noqa: E401, E702, E731
ANSWERS = {"0": "x**2 for x in range(10)", "1": ".1 + .1 + .1 == .3", "11": "now - birthday", "12": "Decimal('0.70')", "13": "sequence unpacking", "15": "Generators are a simple and powerful tool", "16": "help=\"echo the string you use here\"", "18": "multiple levels of sorting", "19": "multiple destinations", "2": "specify a default value for one or more arguments", "21": "urlopen('http://python.org/')", "23": "set of symbolic names bound to unique values", "24": "listen(5)", "25": "in net", "27": "itertools module", "3": "int(input(", "31": "indentation for grouping", "33": "#!/usr/bin/env python", "36": "Guido van Rossum", "37": "create built-in modules containing functions", "39": "copy.copy(", "4": "-m venv tutorial-env", "40": "tuple and list data types", "41": "random.random()", "42": "called config or cfg", "5": "json.dump(x, f)", "6": "instance variables are for data unique to each instance", "7": "argv variable in the sys module", "8": "searches for a built-in module", "9": "rjust"}
import hashlib
import json
import os
import re
import sqlite3
import sys
import time
from pathlib import Path

root = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parent.parent)
label = sys.argv[2] if len(sys.argv) > 2 else "this checkout"
sys.path.insert(0, root); sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np

from knowledge_app import extract

new = hasattr(extract, "SPLITTER_VERSION")
if new:
    from knowledge_app import chunker
    chunker.PASSAGE_CHARS = int(os.environ.get("CHARS", chunker.PASSAGE_CHARS))
    chunker.OVERLAP = int(os.environ.get("OVERLAP", chunker.OVERLAP))
DOCS = Path("/usr/share/doc/python3.11/html")
qs = json.load(open(Path(__file__).resolve().parent / "data" / "knowledge_questions.json"))["questions"]
ans = ANSWERS
items = [(qs[int(k)], a) for k, a in ans.items()]
pages = sorted({r for q, _ in items for r in q["relevant"]} | {str(p.relative_to(DOCS)) for p in sorted((DOCS / "faq").glob("*.html"))})
norm = lambda s: re.sub(r"\s+", " ", s).lower()
rows = []  # (page, text, section, embed_text)
for page in pages:
    for text, loc in extract.passages(extract.pieces(DOCS / page, "html", lambda f: None)):
        name = Path(page).name
        rows.append((page, text, loc.get("section", ""), chunker.embedding_text(name, loc, text) if new else text))
cache_path = Path("/tmp/k1m/cache.json"); cache_path.parent.mkdir(exist_ok=True)
cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
from _minilm import MiniLM

model = MiniLM()
todo = [r[3] for r in rows if hashlib.sha1(r[3].encode()).hexdigest() not in cache]
t0 = time.time()
for i in range(0, len(todo), 32):
    batch = todo[i:i + 32]
    for t, v in zip(batch, model.embed(batch).tolist()):
        cache[hashlib.sha1(t.encode()).hexdigest()] = [round(x, 5) for x in v]
    cache_path.with_suffix(".tmp").write_text(json.dumps(cache)); os.replace(cache_path.with_suffix(".tmp"), cache_path)
V = np.array([cache[hashlib.sha1(r[3].encode()).hexdigest()] for r in rows], dtype=np.float32)
db = sqlite3.connect(":memory:")
db.execute("CREATE VIRTUAL TABLE f USING fts5(text, section, tokenize='porter unicode61 remove_diacritics 2')")
db.executemany("INSERT INTO f(rowid, text, section) VALUES (?, ?, ?)", [(i, r[1], r[2]) for i, r in enumerate(rows)])
def words(q, n=50):
    terms = [t for t in re.findall(r"\w+", q.lower()) if len(t) > 1]
    m = " OR ".join(f'"{t}"' for t in terms)
    return [i for (i,) in db.execute("SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (m, n))]
Q = model.embed([q["q"] for q, _ in items])
out = {}
for mode in ("vectors", "words", "hybrid"):
    r1 = r5 = f1 = 0
    for (q, a), qv in zip(items, Q):
        vec = list(np.argsort(-(V @ qv))[:50])
        w = words(q["q"])
        if mode == "vectors": ranked = vec
        elif mode == "words": ranked = w
        else:
            score = {}
            for lst in (vec, w):
                for rank, i in enumerate(lst): score[i] = score.get(i, 0) + 1 / (60 + rank + 1)
            ranked = sorted(score, key=lambda i: -score[i])
        good = [i for i in ranked[:5] if rows[i][0] in q["relevant"] and norm(a) in norm(rows[i][1])]
        r5 += bool(good); r1 += bool(good and good[0] == ranked[0])
        f1 += bool(ranked and rows[ranked[0]][0] in q["relevant"])
    n = len(items)
    out[mode] = f"passage r@1 {r1/n:.2f} r@5 {r5/n:.2f} file r@1 {f1/n:.2f}"
sizes = [len(r[1]) for r in rows]
print(json.dumps({"label": label, "passages": len(rows), "mean_chars": round(sum(sizes)/len(sizes)), "under_60": sum(s < 60 for s in sizes),
                  "embedded_s": round(time.time() - t0), **out}), flush=True)
