"""Hybrid search: the words (FTS5 / tsvector) and the meaning (vectors), fused by reciprocal
rank fusion, so a passage that says it differently is found and an exact name or number that
the words match still comes first.

RRF: each list gives a passage 1 / (RRF_K + rank); the sums order the result. It needs no
calibration between bm25 scores and cosine distances, which are not comparable. A third list
holds the word matches that contain every exact token of the query (a number, a code, a name
shaped like one, a quoted phrase): embeddings blur "invoice 4711" into
"an invoice", and among near-identical passages their order would otherwise outvote the words.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from navi_project import connections

from . import embeddings, indexer, relatedness, vectors, words
from .models import Document, Passage, VectorSpace

RRF_K = 60
CANDIDATES = 50  # from each list before fusing
MAX_K = 50


_QUOTED = re.compile(r'"([^"]{2,200})"')
_TOKEN = re.compile(r"\w+", re.UNICODE)


def exact_tokens(query: str) -> list[str]:
    """What the query says exactly: quoted phrases and tokens shaped like names or codes — with
    a digit ("4711", "v2"), an underscore, capitals inside ("DTrace", "McAllister") or all
    capitals ("ACME"). A plain capitalised word ("Python", "Anna") is not: in a question it is
    as often the corpus's everyday subject as a rare name."""
    found = [q.lower() for q in _QUOTED.findall(query)]
    for match in _TOKEN.finditer(query):
        token = match.group(0)
        if (any(c.isdigit() for c in token) or "_" in token or any(c.isupper() for c in token[1:])
                or (len(token) > 1 and token.isupper())):
            found.append(token.lower())
    return found


def _has_all(text: str, tokens: list[str]) -> bool:
    lowered = text.lower()
    return all(re.search(r"(?<!\w)" + re.escape(t) + r"(?!\w)", lowered) for t in tokens)


@dataclass
class Hit:
    document_id: str
    name: str
    text: str
    score: float
    location: dict
    passage_id: int = 0  # what a source chip opens (GET /knowledge/passages/<id>)

    def as_dict(self) -> dict:
        return {"document_id": self.document_id, "name": self.name, "text": self.text,
                "score": round(self.score, 6), "location": self.location, "passage_id": self.passage_id}


def fuse(*ranked: list[int]) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of id lists (best first each): (id, score), best first."""
    scores: dict[int, float] = {}
    for ids in ranked:
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def _space(dim: int) -> VectorSpace | None:
    return VectorSpace.objects.filter(model=connections.embedding_model(), dim=dim).first()


def meaning(owner_id: int, kind: str, query: str, limit: int) -> list[tuple[int, float]]:
    """The owner's ids of `kind` nearest to the query's meaning: (id, cosine similarity), or []
    when there is no embedding model or vector index now."""
    if vectors.available() != "ok":
        return []
    vector = embeddings.embed_query(query)
    if vector is None:
        return []
    space = _space(len(vector))
    if space is None:
        return []
    return [(i, 1.0 - d) for i, d in vectors.nearest(space, kind, owner_id, vector, limit)]


def search(owner_id: int, query: str, k: int = 5, *, mode: str = "hybrid") -> list[Hit]:
    """The owner's best `k` passages for `query` (mode: hybrid, words or vectors)."""
    query = query.strip()
    k = max(1, min(int(k), MAX_K))
    if not query:
        return []
    indexer.queue_backfill_if_needed()
    by_words = [i for i, _ in words.ranked(owner_id, query, CANDIDATES)] if mode != "vectors" else []
    by_meaning = [i for i, _ in meaning(owner_id, "passage", query, CANDIDATES)] if mode != "words" else []
    exact: list[int] = []
    if mode == "hybrid" and by_words and by_meaning and (tokens := exact_tokens(query)):
        texts = dict(Passage.objects.filter(pk__in=by_words).values_list("pk", "text"))
        exact = [i for i in by_words if _has_all(texts.get(i, ""), tokens)]
    fused = fuse(by_words, by_meaning, exact)
    rows = {
        p.pk: p for p in Passage.objects.filter(
            pk__in=[i for i, _ in fused[: k * 3]], owner_id=owner_id, document__status="ready"
        ).select_related("document")
    }
    hits = []
    for passage_id, score in fused:
        passage = rows.get(passage_id)
        if passage is None:
            continue  # a vector of a passage that is gone, or of a document still indexing
        hits.append(Hit(str(passage.document_id), passage.document.name, passage.text, score, passage.location, passage.pk))
        if len(hits) == k:
            break
    return hits


def facts_by_meaning(owner_id: int, query: str, limit: int) -> list[int]:
    """memory_app's hook: the owner's fact ids related in meaning to the query, nearest first
    (relatedness: read against the model's own similarities to unrelated text)."""
    found = meaning(owner_id, "fact", query, limit)
    vector = embeddings.embed_query(query) if found else None  # known by now: meaning() asked for it
    references = _references(len(vector)) if vector is not None else None
    return relatedness.related(found, vector, references) if references else []


_reference_lock = threading.Lock()
_reference_vectors: dict[tuple, list[list[float]]] = {}


def _references(dim: int) -> list[list[float]] | None:
    """relatedness.REFERENCE_TEXTS embedded by the current model, once per process and model
    (one request of short texts), or None while embeddings cannot be had."""
    key = embeddings.model_key()
    with _reference_lock:
        known = _reference_vectors.get(key)
    if known is not None and len(known[0]) == dim:
        return known
    try:
        made = embeddings.embed(list(relatedness.REFERENCE_TEXTS), timeout=embeddings.QUERY_TIMEOUT_S)
    except embeddings.EmbeddingError:
        return None
    if len(made[0]) != dim:
        return None  # the model changed between the query and now: next time
    with _reference_lock:
        _reference_vectors[key] = made
    return made


def status() -> str | None:
    """/health's line: None when search by meaning works (or nothing needs it yet), else what
    is missing and what to do. Search by words goes on either way."""
    store = vectors.available()
    if store != "ok":
        return f"degraded: no vector index, search uses words only — {store}"
    current = embeddings.state()
    if current.status == "unknown" or (current.status != "ok" and embeddings.usable()):
        try:  # never asked, or a failure old enough to ask again
            embeddings.embed(["health"], timeout=embeddings.QUERY_TIMEOUT_S)
        except embeddings.EmbeddingError:
            pass
        current = embeddings.state()
    if current.status == "missing":
        return f"degraded: no embedding model, search uses words only — {embeddings.pull_hint()}"
    if current.status in ("unreachable", "error") and Document.objects.exists():
        return f"degraded: no embedding model reachable ({current.detail}), search uses words only"
    return None
