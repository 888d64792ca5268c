"""`bench/knowledge.py passages`: does the search return the passage that answers, not only the
file? Navi's real path (Document + indexer.index_document_now, embeddings from all-MiniLM-L6-v2
served as Ollama's /api/embed) against Open WebUI's default retrieval reproduced on the same
corpus and the same embeddings (bench/_knowledge_owui.py). See bench/README.md (issue 54)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import _knowledge_corpus as corpus
from _knowledge_metrics import HEADER, Hit, Scores, answers, load_set, row

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "data" / "knowledge_passages.json"
CACHE = Path(tempfile.gettempdir()) / "navi-bench-embed-cache.sqlite"


class Embedder:
    """The numpy model behind the bench's /api/embed; counts its own seconds (left out of Navi's
    indexing throughput) and, while `caching`, keeps passage vectors by text in a SQLite file so
    a second indexing of the same corpus does not wait for the model again."""

    def __init__(self, cache: Path | None) -> None:
        from _minilm import MiniLM

        self.model, self.seconds, self.calls, self.hits = MiniLM(), 0.0, 0, 0
        self.caching, self.lock = False, threading.Lock()
        self.db = sqlite3.connect(str(cache), check_same_thread=False) if cache else None
        if self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS v (key TEXT PRIMARY KEY, vec BLOB)")

    def __call__(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        keys = [hashlib.sha256(("all-minilm-l6-v2\0" + t).encode()).hexdigest() for t in texts]
        found: dict[str, list[float]] = {}
        if self.db and self.caching:
            with self.lock:
                for key in keys:
                    got = self.db.execute("SELECT vec FROM v WHERE key = ?", (key,)).fetchone()
                    if got:
                        found[key] = np.frombuffer(got[0], dtype=np.float32).tolist()
        todo = [(k, t) for k, t in zip(keys, texts) if k not in found]
        started = time.perf_counter()
        if todo:
            vectors = self.model.embed([t for _, t in todo]).astype(np.float32)
            for (key, _), v in zip(todo, vectors):
                found[key] = v.tolist()
                if self.db and self.caching:
                    with self.lock:
                        self.db.execute("INSERT OR REPLACE INTO v VALUES (?, ?)", (key, v.tobytes()))
            if self.db and self.caching:
                with self.lock:
                    self.db.commit()
        with self.lock:
            self.seconds += time.perf_counter() - started
            self.calls += 1
            self.hits += len(texts) - len(todo)
        return [found[k] for k in keys]


def _http_embed(url: str):
    def embed(texts: list[str]) -> list[list[float]]:
        body = json.dumps({"model": "all-minilm-l6-v2", "input": texts}).encode()
        request = urllib.request.Request(f"{url}/api/embed", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=900) as response:
            return json.loads(response.read())["embeddings"]
    return embed


def _index(user, root: Path, files: list[Path], embedder: Embedder) -> dict:
    from knowledge_app import extract, indexer
    from knowledge_app.models import Document, Passage

    embedder.caching, model_s, started = True, embedder.seconds, time.perf_counter()
    for path in files:
        name = str(path.relative_to(root))
        data = path.read_bytes()
        doc = Document.objects.create(owner=user, name=name, kind=extract.kind_of(name),
                                      sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        dest = indexer.file_path(doc)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        indexer.index_document_now(doc.pk)
    wall, model_s = time.perf_counter() - started, embedder.seconds - model_s
    embedder.caching = False
    failed = list(Document.objects.exclude(status="ready").values_list("name", "error"))
    count = Passage.objects.count()
    navi_s = max(wall - model_s, 1e-9)
    return {"files": len(files), "passages": count, "failed": failed, "wall_s": wall, "model_s": model_s,
            "cache_hits": embedder.hits, "passages_per_s": count / navi_s, "files_per_s": len(files) / navi_s,
            "passages_per_s_with_model": count / wall}


def _reranker_url() -> str | None:
    """A /v1/rerank server (llama.cpp, TEI, vLLM, or bench/_rerank.py: a bi-encoder, since no
    registry package this machine reaches ships a cross-encoder's weights; bench/README.md)."""
    return os.environ.get("RERANK_BASE_URL") or None


def _ask_reranked(questions: list[dict], user, search, rerank) -> tuple[Scores, int, str]:
    """The hybrid search with the reranker on: the scores, how many queries it re-ordered (a
    failure falls back to the fused order silently, which would pass for the reranker's), the
    last failure."""
    scores, used, failure = Scores(), 0, ""
    for q in questions:
        started = time.perf_counter()
        hits = [Hit(h.name, h.text) for h in search.search(user.pk, q["q"], 5, mode="hybrid")]
        scores.add(q, hits, (time.perf_counter() - started) * 1000)
        state = rerank.state()
        used += state.status == "ok"
        failure = state.detail if state.status == "error" else failure
    return scores, used, failure


def _openwebui_itself(python: str, url: str, which: str, embedder: Embedder) -> dict:
    """Open WebUI's own functions in its own venv (bench/_openwebui_real.py), on this bench's /api/embed."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        embedder.caching = True  # its chunks are mostly the reproduction's: their vectors are kept
        done = subprocess.run([python, str(HERE / "_openwebui_real.py"), "--embed-url", url, "--set", which,
                               "--out", f.name], stdout=sys.stderr)
        embedder.caching = False
        if done.returncode:
            print(f"Open WebUI itself: failed (exit {done.returncode})")
            return {}
        result = json.loads(Path(f.name).read_text())
    print(f"Open WebUI {result['version']} itself: {result.get('chunks')} chunks; its configuration: {result['config']}")
    return {f"Open WebUI {result['version']} (its defaults: vector)": result["figures"]}


def _ask(questions: list[dict], search) -> Scores:
    scores = Scores()
    for q in questions:
        started = time.perf_counter()
        hits = search(q["q"])
        scores.add(q, hits, (time.perf_counter() - started) * 1000)
    return scores


def run(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="knowledge.py passages")
    parser.add_argument("--set", dest="which", choices=("frozen", "dev"), default="frozen")
    parser.add_argument("--db", default=os.environ.get("KNOWLEDGE_BENCH_DB"),
                        help="an SQLite file: indexed into when new, asked again when it holds the corpus")
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--no-openwebui", action="store_true", help="leave out the reproduced Open WebUI")
    parser.add_argument("--openwebui-python", default=os.environ.get("OPENWEBUI_PYTHON"),
                        help="the Python of a venv with open-webui installed: Open WebUI itself as a row")
    parser.add_argument("--no-cache", action="store_true", help="embed every passage with the model")
    parser.add_argument("--index-only", action="store_true", help="index (and embed Open WebUI's chunks), ask nothing")
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    questions = [] if args.index_only else load_set(QUESTIONS, args.which)
    root = corpus.fetch()
    files = corpus.files(root)
    embedder = Embedder(None if args.no_cache else CACHE)
    from knowledge import _user, django_setup, serve

    url = serve(embedder)
    reuse = bool(args.db) and Path(args.db).is_file()
    if args.db:
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(args.db).resolve()}"
    django_setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from knowledge_app import embeddings, rerank, search

    settings.OLLAMA_HOST, settings.EMBEDDING_MODEL = url, "all-minilm-l6-v2"
    settings.EMBEDDING_TIMEOUT_S = 900
    settings.KNOWLEDGE_DIR = Path(os.environ["DATABASE_URL"].removeprefix("sqlite:///")).parent / "files"
    for name in ("RERANK_BASE_URL", "RERANK_MODEL"):
        setattr(settings, name, "")
    user = get_user_model().objects.filter(username="reader").first() or _user("reader")
    out: dict = {"set": args.which, "questions": len(questions), "corpus": str(root), "rows": {}}
    if reuse:
        print(f"index: reused {args.db}")
    else:
        out["indexing"] = stats = _index(user, root, files, embedder)
        print(f"index: {stats['files']} files → {stats['passages']} passages; {stats['wall_s']:.0f} s wall of which "
              f"{stats['model_s']:.0f} s in the model ({stats['cache_hits']} vectors from the cache); Navi's own: "
              f"{stats['passages_per_s']:.1f} passages/s, {stats['files_per_s']:.2f} files/s; failed: {stats['failed']}")
    rows = [("Navi words", "words"), ("Navi vectors", "vectors"), ("Navi hybrid (default)", "hybrid")]
    for label, mode in rows if questions else []:
        getattr(embeddings, "_queries", {}).clear()  # each mode's first pass: no query vector kept from another
        scores = _ask(questions, lambda q, mode=mode: [Hit(h.name, h.text) for h in search.search(user.pk, q, 5, mode=mode)])
        out["rows"][label] = scores.figures()
    rerank_url = _reranker_url() if questions else None
    if rerank_url:
        settings.RERANK_BASE_URL = rerank_url
        settings.RERANK_MODEL = os.environ.get("RERANK_MODEL", "reranker")
        getattr(embeddings, "_queries", {}).clear()
        rerank.forget()
        scores, used, failure = _ask_reranked(questions, user, search, rerank)
        label = f"Navi hybrid + reranker ({settings.RERANK_MODEL}, {settings.RERANK_CANDIDATES} candidates)"
        out["rows"][label] = scores.figures()
        out["reranker"] = {"url": rerank_url, "model": settings.RERANK_MODEL, "candidates": settings.RERANK_CANDIDATES,
                           "reordered": used, "questions": len(questions), "last_failure": failure}
        print(f"reranker at {rerank_url}: {used} of {len(questions)} queries re-ordered"
              + (f"; last failure: {failure}" if failure else ""))
        settings.RERANK_BASE_URL = ""
    if not args.no_openwebui:
        from _knowledge_owui import Index

        embedder.caching = True
        started, model_s = time.perf_counter(), embedder.seconds
        index = Index(root, files, _http_embed(url))
        embedder.caching = False
        out["openwebui_chunks"] = len(index.texts)
        print(f"Open WebUI reproduction: {len(index.texts)} chunks, {time.perf_counter() - started:.0f} s "
              f"({embedder.seconds - model_s:.0f} s in the model)")
        if questions:
            scores = _ask(questions, lambda q: [Hit(n, t) for n, t in index.search(q, 5)])
            out["rows"]["Open WebUI defaults (vector), reproduced"] = scores.figures()
    if args.openwebui_python and questions:
        out["rows"].update(_openwebui_itself(args.openwebui_python, url, args.which, embedder))
    if not questions:
        return
    print(f"\n{args.which} set: {len(questions)} questions "
          f"({sum(q['kind'] == 'paraphrased' for q in questions)} paraphrased)\n{HEADER}")
    for label, figures in out["rows"].items():
        print(row(label, figures))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))


def check(which: str) -> int:
    """Each answer span is in its relevant file's text as a loader reads it (no system asked)."""
    from _knowledge_owui import load

    root, bad = corpus.fetch(), 0
    for q in load_set(QUESTIONS, which):
        texts = {name: "\n".join(load(root / name)) + "\n" + (root / name).read_text(errors="replace")
                 for name in q["relevant"]}
        words = len(q["answer"].split())
        if not any(answers(t, q["answer"]) for t in texts.values()) or not 5 <= words <= 15:
            bad += 1
            print(f"NOT FOUND or {words} words: {q['q']!r} → {q['answer']!r} in {q['relevant']}")
    print(f"{which}: {bad} bad")
    return bad
