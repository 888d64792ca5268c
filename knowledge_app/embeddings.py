"""The embedding client: the owner's model server turns text into vectors.

Ollama's `POST {OLLAMA_HOST}/api/embed` (a list of inputs per request), or an OpenAI-compatible
`POST {EMBEDDING_BASE_URL}/embeddings` when that is set. What the last call found is kept
(`state`), so search skips a server known to be down or without the model for a while instead
of waiting on it every time, and /health can say what is wrong.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import httpx
from django.conf import settings

from navi_project import connections

RETRY_AFTER_S = 30.0  # a failed server or missing model is asked again after this
QUERY_TIMEOUT_S = 10.0  # a search waits this long for its query's vector, then uses the words
QUERY_CACHE = 64  # recent queries' vectors kept: a turn's request is embedded once, off the database thread


class EmbeddingError(Exception):
    """The server could not embed: `reason` says what to do."""


class ModelMissing(EmbeddingError):
    pass


@dataclass
class State:
    status: str = "unknown"  # unknown | ok | missing | unreachable | error
    detail: str = ""
    at: float = 0.0
    key: tuple = ()


_lock = threading.Lock()
_state = State()
_client: httpx.Client | None = None
_queries: OrderedDict[tuple, list[float]] = OrderedDict()


def _http() -> httpx.Client:
    """One client per process: connections are kept, and its TLS set-up (80 ms) is done once."""
    global _client
    with _lock:
        if _client is None:
            _client = httpx.Client()
        return _client


def _key() -> tuple:
    return (connections.embedding_model(), settings.EMBEDDING_BASE_URL, connections.ollama_url())


def model_key() -> tuple:
    """Which model on which server embeds now: what a vector made from it is kept under."""
    return _key()


def state() -> State:
    """What the last call to the current server and model found ("unknown" if none yet)."""
    with _lock:
        return _state if _state.key == _key() else State(key=_key())


def _note(status: str, detail: str = "") -> None:
    global _state
    with _lock:
        _state = State(status, detail, time.monotonic(), _key())


def forget() -> None:
    """Forget what the last call found (tests change servers between cases)."""
    global _state
    with _lock:
        _state = State()
        _queries.clear()


def usable() -> bool:
    """False while a recent call found the server down or without the model."""
    current = state()
    return current.status in ("unknown", "ok") or time.monotonic() - current.at > RETRY_AFTER_S


def pull_hint() -> str:
    model = connections.embedding_model()
    if settings.EMBEDDING_BASE_URL:
        return f"make `{model}` available at {settings.EMBEDDING_BASE_URL} or set EMBEDDING_MODEL to a model it serves"
    return f"run `ollama pull {model}` on the Ollama server at {connections.ollama_url()}"


def embed(texts: list[str], *, timeout: float | None = None) -> list[list[float]]:
    """One vector per text, in order, asked for in batches of EMBEDDING_BATCH."""
    vectors: list[list[float]] = []
    batch = max(1, settings.EMBEDDING_BATCH)
    for start in range(0, len(texts), batch):
        vectors.extend(_call(texts[start:start + batch], timeout or settings.EMBEDDING_TIMEOUT_S))
    return vectors


def server_url() -> str:
    """Where embeddings are asked for: the OpenAI-compatible `…/v1/embeddings` or Ollama's `/api/embed`."""
    if settings.EMBEDDING_BASE_URL:
        base = settings.EMBEDDING_BASE_URL.rstrip("/")
        return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"
    return f"{connections.ollama_url().rstrip('/')}/api/embed"


def _call(texts: list[str], timeout: float) -> list[list[float]]:
    model = connections.embedding_model()
    url = server_url()
    if settings.EMBEDDING_BASE_URL:
        key = settings.EMBEDDING_API_KEY or settings.OPENAI_API_KEY
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"model": model, "input": texts}
    else:
        headers = {}
        body = {"model": model, "input": texts, "truncate": True}
    try:
        response = _http().post(url, json=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        _note("unreachable", f"cannot reach {url} ({type(exc).__name__})")
        raise EmbeddingError(f"the embedding server at {url} cannot be reached; check that it runs") from exc
    if response.status_code == 404 or (response.status_code == 400 and "not found" in response.text):
        _note("missing", f"{model} is not on the server")
        raise ModelMissing(f"no embedding model `{model}`: {pull_hint()}")
    if response.status_code >= 400:
        _note("error", f"HTTP {response.status_code} from {url}")
        raise EmbeddingError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}")
    try:
        payload = response.json()
        if settings.EMBEDDING_BASE_URL:
            rows = sorted(payload["data"], key=lambda row: row["index"])
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
        else:
            vectors = [[float(x) for x in v] for v in payload["embeddings"]]
    except (ValueError, KeyError, TypeError) as exc:
        _note("error", f"unreadable answer from {url}")
        raise EmbeddingError(f"{url} answered something that is not a list of embeddings") from exc
    if len(vectors) != len(texts) or not vectors or len({len(v) for v in vectors}) != 1 or not vectors[0]:
        _note("error", f"wrong number or size of vectors from {url}")
        raise EmbeddingError(f"{url} returned {len(vectors)} vectors of mixed or zero size for {len(texts)} texts")
    _note("ok")
    return vectors


def embed_query(text: str, timeout: float = QUERY_TIMEOUT_S) -> list[float] | None:
    """The query's vector, or None when embeddings cannot be had now (search uses the words).
    Recent ones are kept, so a caller can embed a query first in a thread of its own (the
    agent's turn) and the search on the database thread then finds it without waiting."""
    text = text[:4000]
    key = (_key(), text)
    with _lock:
        if (known := _queries.get(key)) is not None:
            _queries.move_to_end(key)
            return known
    if not usable():
        return None
    try:
        vector = embed([text], timeout=timeout)[0]
    except EmbeddingError:
        return None
    with _lock:
        _queries[key] = vector
        while len(_queries) > QUERY_CACHE:
            _queries.popitem(last=False)
    return vector
