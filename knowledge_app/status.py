"""What knowledge search can do now, for GET /knowledge and /health: whether embeddings can be
made (else search uses the words), and whether the reranker answers. Asked from the start — with
no document yet — so a server that is down or lacks the model is said before anything is uploaded.
"""

from __future__ import annotations

from django.conf import settings

from navi_project import connections

from . import embeddings, rerank, vectors

PROBE_TEXT = "health"


def embedding() -> dict:
    """{"status": ok | missing | unreachable | error | no_vector_index, "model", "server",
    "detail", "hint"}: the embedding server's state, asked now if it never was (or failed long
    enough ago to ask again)."""
    model = connections.embedding_model()
    found = {"model": model, "server": embeddings.server_url()}
    store = vectors.available()
    if store != "ok":
        return {"status": "no_vector_index", **found, "detail": store, "hint": store}
    current = embeddings.state()
    if current.status == "unknown" or (current.status != "ok" and embeddings.usable()):
        try:
            embeddings.embed([PROBE_TEXT], timeout=embeddings.QUERY_TIMEOUT_S)
        except embeddings.EmbeddingError:
            pass
        current = embeddings.state()
    hint = {"missing": embeddings.pull_hint(),
            "unreachable": f"start the embedding server at {found['server']} or point "
                           f"{'EMBEDDING_BASE_URL' if settings.EMBEDDING_BASE_URL else 'OLLAMA_HOST'} at one that runs",
            "error": f"check the embedding server's log; {embeddings.pull_hint()}"}.get(current.status, "")
    return {"status": current.status, **found, "detail": current.detail, "hint": hint}


def problem(state: dict | None = None) -> str | None:
    """/health's `embeddings` line: None when search by meaning works, else what is missing and
    what to do (from `state`, an `embedding()` just made, if given). Search by words goes on either way."""
    state = state or embedding()
    if state["status"] == "ok":
        return None
    if state["status"] == "no_vector_index":
        return f"degraded: no vector index, search uses words only — {state['detail']}"
    if state["status"] == "missing":
        return f"degraded: no embedding model, search uses words only — {state['hint']}"
    return f"degraded: no embedding model reachable ({state['detail']}), search uses words only — {state['hint']}"


def reranker() -> dict | None:
    """{"status": ok | error | unknown, "model", "server", "detail"} when a reranker is set
    (asked now if it never was), else None."""
    if not rerank.configured():
        return None
    if rerank.state().status == "unknown" or rerank.usable() and rerank.state().status == "error":
        rerank.order(PROBE_TEXT, [PROBE_TEXT])
    current = rerank.state()
    return {"status": current.status, "model": settings.RERANK_MODEL, "server": settings.RERANK_BASE_URL,
            "detail": current.detail}


def reranker_problem() -> str | None:
    """/health's `rerank` entry: None when none is set, "ok", or why search keeps its own order."""
    state = reranker()
    if state is None or state["status"] == "ok":
        return None if state is None else "ok"
    return f"degraded: the reranker is not used, search keeps its own order — {state['detail']}"
