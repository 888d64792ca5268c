"""Open WebUI itself on the passage bench: run by `knowledge.py passages --openwebui-python PY`
with the Python of a venv where `pip install open-webui==0.12.4` went (bench/README.md), never in
Navi's. Its own functions do the work, with its default configuration read from its config
store: `Loader` (routers' `build_loader_from_config`) reads each file, `save_docs_to_vector_db`
splits and embeds into one knowledge collection of its default vector DB (Chroma, under
DATA_DIR), and a question is embedded with its `get_embedding_function` and answered by
`query_doc` (hybrid search off by default). Embeddings: the parent bench's /api/embed
(all-MiniLM-L6-v2), as Open WebUI's `ollama` engine.

    PY bench/_openwebui_real.py --embed-url URL --set frozen --out figures.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mimetypes
import os
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _knowledge_corpus as corpus  # noqa: E402
from _knowledge_metrics import Hit, Scores, load_set  # noqa: E402

COLLECTION = "navi-bench-knowledge"


def _environment(embed_url: str, data_dir: Path) -> None:
    import open_webui

    package = Path(open_webui.__file__).parent
    os.environ.update({
        "DATA_DIR": str(data_dir), "FRONTEND_BUILD_DIR": str(package / "frontend"), "WEBUI_SECRET_KEY": "bench",
        "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "GLOBAL_LOG_LEVEL": "WARNING",
        "RAG_EMBEDDING_ENGINE": "ollama", "RAG_OLLAMA_BASE_URL": embed_url, "RAG_EMBEDDING_MODEL": "all-minilm-l6-v2",
        "RAG_EMBEDDING_CONCURRENT_REQUESTS": "4",  # default 0 = every chunk of a file at once; what is retrieved is the same
    })


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--embed-url", required=True)
    parser.add_argument("--set", dest="which", default="frozen")
    parser.add_argument("--out", required=True)
    parser.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "navi-bench-openwebui"))
    args = parser.parse_args()
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    _environment(args.embed_url, data_dir)
    import open_webui
    from open_webui.models.config import Config
    from open_webui.retrieval.utils import build_loader_from_config, get_embedding_function, query_doc
    from open_webui.retrieval.vector.factory import get_vector_db_client
    from open_webui.routers.retrieval import RETRIEVAL_CONFIG_KEYS, save_docs_to_vector_db

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def wait(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    config = wait(Config.get_many(*RETRIEVAL_CONFIG_KEYS.values()))
    shown = {k: config.get(k) for k in ("rag.chunk_size", "rag.chunk_overlap", "rag.text_splitter", "rag.top_k",
                                        "rag.enable_hybrid_search", "rag.enable_markdown_header_text_splitter",
                                        "rag.chunk_min_size_target", "rag.embedding_engine", "rag.embedding_model")}
    request = types.SimpleNamespace(app=types.SimpleNamespace(state=types.SimpleNamespace(ef=None, main_loop=loop)))
    root = corpus.fetch()
    files = corpus.files(root)
    client = get_vector_db_client()
    out: dict = {"version": open_webui.__version__ if hasattr(open_webui, "__version__") else "0.12.4", "config": shown}
    if not client.has_collection(collection_name=COLLECTION):
        started = time.perf_counter()
        loader = build_loader_from_config(config)
        for path in files:
            name = str(path.relative_to(root))
            docs = wait(loader.aload(name, mimetypes.guess_type(name)[0] or "application/octet-stream", str(path)))
            for doc in docs:
                doc.metadata = {**doc.metadata, "name": name, "source": name}
            save_docs_to_vector_db(request, docs, COLLECTION, config, metadata={"name": name}, add=True)
        out["index_s"] = time.perf_counter() - started
    embed = get_embedding_function(config["rag.embedding_engine"], config["rag.embedding_model"], None,
                                   config["rag.ollama.base_url"], config["rag.ollama.api_key"],
                                   config["rag.embedding_batch_size"])
    scores = Scores()
    for q in load_set(HERE / "data" / "knowledge_passages.json", args.which):
        started = time.perf_counter()
        vector = wait(embed(q["q"]))
        result = query_doc(COLLECTION, vector, 5)
        ms = (time.perf_counter() - started) * 1000
        hits = [Hit(m.get("name", ""), text) for text, m in zip(result.documents[0], result.metadatas[0])]
        scores.add(q, hits, ms)
    got = client.get(collection_name=COLLECTION)
    out["chunks"] = len(got.ids[0]) if got and got.ids else None
    out["figures"] = scores.figures()
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
