"""Hybrid search: the words (FTS5 / tsvector) and the meaning (vectors), fused by weighted
reciprocal rank fusion, so a passage that says it differently is found and an exact name or
number that the words match still comes first; then, when one is set, a reranker re-orders the
best few (rerank.py).

RRF: each list gives a passage weight / (RRF_K + rank); the sums order the result. It needs no
calibration between bm25 scores and cosine distances, which are not comparable. A third list
holds the word matches that contain every exact token of the query (a number, a code, a name
shaped like one, a quoted phrase): embeddings blur "invoice 4711" into "an invoice", and among
near-identical passages their order would otherwise outvote the words.

The weights depend on the query (`weights`, constants below): a question in plain words is the
vectors' to answer — the words then match its common words everywhere, and an equal vote costs
paraphrased questions their page — while a query of names, codes or a few keywords is the
words'. bench/ranking.py measures them.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from django.conf import settings

from navi_project import connections

from . import embeddings, indexer, relatedness, rerank, vectors, words
from .models import Passage, VectorSpace

RRF_K = 60
CANDIDATES = 50  # from each list before fusing
MAX_K = 50
# Fusion weights (words, vectors, exact tokens) by the kind of query (`query_kind`), measured with
# bench/ranking.py (python3-doc, all-MiniLM-L6-v2; paraphrased questions' file r@1 0.721 with equal
# weights, 0.767 with the words at 0.25-0.5, literal ones unchanged at 0.875; bench/README "Ranking").
WEIGHTS = {
    "literal": (1.0, 1.0, 1.0),  # names, codes, a quoted phrase: the words and exact tokens count fully
    "keywords": (1.0, 1.0, 1.0),  # a few words, no sentence
    "question": (0.25, 1.0, 1.0),  # a sentence: its common words match everywhere, its meaning is the vectors'
}
KEYWORDS_MAX = 4  # words in a query of keywords; more (or a "?") make a question
LITERAL_MAX = 6  # words in a literal query (one with exact tokens); more make a question


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


def fuse(*ranked: list[int], weights: tuple[float, ...] = ()) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of id lists (best first each), each list's votes times its weight
    (1 when not given): (id, score), best first."""
    scores: dict[int, float] = {}
    for n, ids in enumerate(ranked):
        weight = weights[n] if n < len(weights) else 1.0
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (RRF_K + rank)
    return sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))


def query_kind(query: str) -> str:
    """"literal" (a few words with exact tokens or a quoted phrase), "keywords" (a few words) or
    "question" (a sentence, or anything asked with "?": its exact tokens still get their own list)."""
    count, asked = len(_TOKEN.findall(query)), query.rstrip().endswith("?")
    if not asked and count <= LITERAL_MAX and exact_tokens(query):
        return "literal"
    return "keywords" if not asked and count <= KEYWORDS_MAX else "question"


def weighted_fuse(query: str, by_words: list[tuple[int, float]], by_meaning: list[tuple[int, float]],
                  exact: list[int]) -> list[tuple[int, float]]:
    """The three lists ((id, score) best first; exact: ids) fused with the query kind's weights."""
    return fuse([i for i, _ in by_words], [i for i, _ in by_meaning], exact, weights=WEIGHTS[query_kind(query)])


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
    """The owner's best `k` passages for `query` (mode: hybrid, words or vectors), re-ordered by
    the reranker when one is set."""
    query = query.strip()
    k = max(1, min(int(k), MAX_K))
    if not query:
        return []
    indexer.queue_backfill_if_needed()
    by_words = words.ranked(owner_id, query, CANDIDATES) if mode != "vectors" else []
    by_meaning = meaning(owner_id, "passage", query, CANDIDATES) if mode != "words" else []
    exact: list[int] = []
    if mode == "hybrid" and by_words and by_meaning and (tokens := exact_tokens(query)):
        texts = dict(Passage.objects.filter(pk__in=[i for i, _ in by_words]).values_list("pk", "text"))
        exact = [i for i, _ in by_words if _has_all(texts.get(i, ""), tokens)]
    fused = weighted_fuse(query, by_words, by_meaning, exact)
    reranking = rerank.usable()
    wanted = max(k * 3, settings.RERANK_CANDIDATES) if reranking else k * 3
    rows = {
        p.pk: p for p in Passage.objects.filter(
            pk__in=[i for i, _ in fused[:wanted]], owner_id=owner_id, document__status="ready"
        ).select_related("document")
    }
    hits = []
    for passage_id, score in fused:
        passage = rows.get(passage_id)
        if passage is None:
            continue  # a vector of a passage that is gone, or of a document still indexing
        hits.append(Hit(str(passage.document_id), passage.document.name, passage.text, score, passage.location, passage.pk))
        if len(hits) == (max(k, settings.RERANK_CANDIDATES) if reranking else k):
            break
    if reranking:  # the best RERANK_CANDIDATES re-ordered, any more asked for after them
        hits = _reranked(query, hits[:settings.RERANK_CANDIDATES]) + hits[settings.RERANK_CANDIDATES:]
    return hits[:k]


def _reranked(query: str, hits: list[Hit]) -> list[Hit]:
    """The hits (only the caller's, already) in the reranker's order, scored by it; as they are
    when it fails. Those it gave no score keep their place after the scored ones."""
    order = rerank.order(query, [hit.text for hit in hits])
    if order is None:
        return hits
    reordered = []
    for index, score in order:
        hit = hits[index]
        if score != float("-inf"):
            hit.score = score
        reordered.append(hit)
    return reordered


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
