"""The optional reranker: a cross-encoder on the owner's server re-orders search's best candidates.

`POST {RERANK_BASE_URL}/v1/rerank` with `{"model", "query", "documents", "top_n"}` answered by
`{"results": [{"index", "relevance_score"}, ...]}` — the Cohere/Jina shape that llama.cpp's
`llama-server --reranking` and vLLM serve. Hugging Face TEI serves `POST /rerank` with
`{"query", "texts"}` answered by `[{"index", "score"}, ...]`: when `/v1/rerank` is not there
(404), that is asked instead, and remembered.

Only what search hands over is sent — the caller's own candidates, RERANK_CANDIDATES at most, so
a query costs one request of a few dozen passages. It never makes a search fail: on an error, a
timeout or an answer that does not fit (an index out of range or twice, a score that is not a
number) the fused order stands, the failure is logged once and shown in the status, and the
server is asked again only after RETRY_AFTER_S.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

import httpx
from django.conf import settings

log = logging.getLogger(__name__)
RETRY_AFTER_S = 30.0  # a failed reranker is skipped this long: searches do not each wait on it
MAX_CHARS = 4000  # of a passage sent (a cross-encoder reads ~512 tokens of it anyway)


class RerankError(Exception):
    """The reranker could not be used: the message says what to check."""


@dataclass
class State:
    status: str = "unknown"  # unknown | ok | error
    detail: str = ""
    at: float = 0.0
    key: tuple = ()


_lock = threading.Lock()
_state = State()
_native: dict[tuple, bool] = {}  # server -> answers TEI's /rerank rather than /v1/rerank
_client: httpx.Client | None = None


def configured() -> bool:
    return bool(settings.RERANK_BASE_URL)


def _key() -> tuple:
    return (settings.RERANK_BASE_URL, settings.RERANK_MODEL)


def state() -> State:
    with _lock:
        return _state if _state.key == _key() else State(key=_key())


def _note(status: str, detail: str = "") -> None:
    global _state
    with _lock:
        before = _state if _state.key == _key() else State()
        _state = State(status, detail, time.monotonic(), _key())
    if status != "ok" and (before.status != status or before.detail != detail):
        log.warning("reranker not used, search keeps the fused order: %s", detail)  # once per new failure
    elif status == "ok" and before.status == "error":
        log.info("reranker at %s answers again", settings.RERANK_BASE_URL)


def forget() -> None:
    """Forget what the last call found (tests change servers between cases)."""
    global _state
    with _lock:
        _state = State()
        _native.clear()


def usable() -> bool:
    current = state()
    return configured() and (current.status != "error" or time.monotonic() - current.at > RETRY_AFTER_S)


def _http() -> httpx.Client:
    global _client
    with _lock:
        if _client is None:
            _client = httpx.Client()
        return _client


def _urls() -> tuple[str, str]:
    """(the Cohere-style URL, TEI's) for RERANK_BASE_URL with or without its /v1."""
    base = settings.RERANK_BASE_URL.rstrip("/")
    root = base.removesuffix("/v1")
    return f"{root}/v1/rerank", f"{root}/rerank"


def order(query: str, documents: list[str]) -> list[tuple[int, float]] | None:
    """The documents' indexes, most relevant first, with the reranker's scores; None when the
    reranker is not set, is skipped after a failure, or fails now (the caller keeps its order).
    Indexes the reranker left out follow in their given order, with no score of their own."""
    if not documents or not usable():
        return None
    try:
        scored = _ask(query, [d[:MAX_CHARS] for d in documents])
    except RerankError as exc:
        _note("error", str(exc))
        return None
    _note("ok")
    ranked = sorted(scored.items(), key=lambda pair: (-pair[1], pair[0]))
    rest = [(i, -math.inf) for i in range(len(documents)) if i not in scored]
    return ranked + rest


def _ask(query: str, documents: list[str]) -> dict[int, float]:
    cohere, tei = _urls()
    server = _key()
    headers = {"Authorization": f"Bearer {settings.RERANK_API_KEY}"} if settings.RERANK_API_KEY else {}
    if not _native.get(server):
        body = {"model": settings.RERANK_MODEL, "query": query, "documents": documents, "top_n": len(documents)}
        response = _post(cohere, body, headers)
        if response.status_code != 404:
            return _read(response, cohere, len(documents))
    body = {"query": query, "texts": documents, "truncate": True}
    response = _post(tei, body, headers)
    if response.status_code == 404:
        raise RerankError(f"neither {cohere} nor {tei} is there (HTTP 404); check RERANK_BASE_URL")
    _native[server] = True
    return _read(response, tei, len(documents))


def _post(url: str, body: dict, headers: dict) -> httpx.Response:
    try:
        return _http().post(url, json=body, headers=headers, timeout=settings.RERANK_TIMEOUT_S)
    except httpx.TimeoutException as exc:
        raise RerankError(f"{url} did not answer within RERANK_TIMEOUT_S ({settings.RERANK_TIMEOUT_S:g} s)") from exc
    except httpx.HTTPError as exc:
        raise RerankError(f"cannot reach {url} ({type(exc).__name__}); check that the reranker runs") from exc


def _read(response: httpx.Response, url: str, count: int) -> dict[int, float]:
    """index -> score from either shape, or RerankError when the answer does not fit."""
    if response.status_code in (401, 403):
        raise RerankError(f"{url} refused the credentials (HTTP {response.status_code}); check RERANK_API_KEY")
    if response.status_code >= 400:
        raise RerankError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        payload = response.json()
    except ValueError as exc:
        raise RerankError(f"{url} answered something that is not JSON") from exc
    rows = payload.get("results") if isinstance(payload, dict) else payload
    if not isinstance(rows, list) or not rows:
        raise RerankError(f"{url} answered no results list")
    scores: dict[int, float] = {}
    for row in rows:
        index = row.get("index") if isinstance(row, dict) else None
        score = (row.get("relevance_score", row.get("score")) if isinstance(row, dict) else None)
        if (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in scores
                or not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score)):
            raise RerankError(f"{url} answered a result that fits none of the {count} passages sent: {str(row)[:120]}")
        scores[index] = float(score)
    return scores
