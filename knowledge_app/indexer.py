"""Indexing a document in the background, embedding passages and facts, re-embedding.

A document is `indexing` until its last passage is written, then `ready`; if reading it fails
it ends `failed` with the reason and none of its passages are kept (search only ever reads
passages of ready documents, so a half-indexed one is never seen). Passages are embedded as
they are written; without an embedding model they are kept for search by words and embedded
later (`backfill`), which is also how a change of EMBEDDING_MODEL re-embeds everything: the
new model gets a space of its own, and the old one is dropped once nothing refers to it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Callable, Iterator

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from memory_app.models import MemoryFact
from navi_project import connections

from . import embeddings, extract, vectors, words
from .models import Document, FactVector, Passage, VectorSpace
from .worker import worker

log = logging.getLogger(__name__)
WRITE_BATCH = 64  # passages written (and embedded) together
PROGRESS_EVERY_S = 0.5
STOPPED = "the server stopped while this document was being indexed; upload it again"


def file_path(document: Document) -> Path:
    return Path(settings.KNOWLEDGE_DIR) / str(document.owner_id) / str(document.id)


def queue_document(document_id) -> None:
    worker.submit(f"document:{document_id}", lambda: index_document(document_id))


def _embed_rows(kind: str, rows: list[tuple[int, int, str]], *, replace: bool = True) -> VectorSpace | None:
    """Embed (id, owner_id, text) rows into the current model's space; None if not possible."""
    if not rows or not embeddings.usable() or vectors.available() != "ok":
        return None
    try:
        found = embeddings.embed([text for _, _, text in rows])
    except embeddings.EmbeddingError as exc:
        log.info("embedding skipped: %s", exc)
        return None
    space = vectors.space_for(connections.embedding_model(), len(found[0]))
    # A fact is embedded again when edited, and a re-run of backfill may meet a passage twice.
    vectors.write(space, kind, [(i, owner, v) for (i, owner, _), v in zip(rows, found)], replace=replace)
    return space


def index_document(document_id) -> None:
    document = Document.objects.filter(pk=document_id, status="indexing").first()
    if document is None:
        return  # deleted meanwhile, or done by another process
    # The claim: of several processes resuming after a restart, the one whose update matches
    # the row as it read it indexes the document.
    now = timezone.now()
    if not Document.objects.filter(pk=document.pk, status="indexing", updated_at=document.updated_at).update(updated_at=now):
        return
    path = file_path(document)
    state = {"read": 0.0, "saved_at": 0.0}

    def progress(fraction: float) -> None:
        state["read"] = fraction
        now = time.monotonic()
        if now - state["saved_at"] >= PROGRESS_EVERY_S:
            state["saved_at"] = now
            Document.objects.filter(pk=document.pk, status="indexing").update(
                progress=min(99, int(fraction * 100)), updated_at=timezone.now())

    _discard_passages(document)
    count, batch, seen = 0, [], set()
    try:
        if not path.is_file():
            raise extract.ExtractError(STOPPED)
        for text, location in extract.passages(extract.pieces(path, document.kind, progress)):
            batch.append(Passage(document=document, owner_id=document.owner_id, seq=count, text=text, location=location))
            count += 1
            if count > settings.KNOWLEDGE_MAX_PASSAGES:
                raise extract.ExtractError(
                    f"the document has more than {settings.KNOWLEDGE_MAX_PASSAGES} passages of text; split it "
                    "into smaller files (or raise KNOWLEDGE_MAX_PASSAGES)")
            if len(batch) >= WRITE_BATCH:
                _write(batch, seen)
                batch = []
                if not Document.objects.filter(pk=document.pk).exists():
                    return  # deleted while indexing: stop (its passages went with it)
        _write(batch, seen)
        if count == 0:
            raise extract.ExtractError("no text found in it (a scanned PDF needs OCR first; an empty file has none)")
    except Exception as exc:  # noqa: BLE001 - any failure ends this document, never the worker
        reason = str(exc) if isinstance(exc, extract.ExtractError) else f"{type(exc).__name__}: {exc}"
        _discard_passages(document)
        Document.objects.filter(pk=document.pk).update(
            status="failed", error=reason[:2000], chunks=0, progress=0, updated_at=timezone.now())
        path.unlink(missing_ok=True)
        return
    Document.objects.filter(pk=document.pk).update(
        status="ready", error="", chunks=count, progress=100, updated_at=timezone.now())
    # The upload stays: the document's page offers it as a download (removed with the document).
    words.added(count)


def _write(batch: list[Passage], seen: set[str]) -> None:
    """Save passages and embed them. A passage repeating an earlier one of the document (a
    running header, a boilerplate line) gets no vector of its own: the first copy is found by
    meaning, and many identical vectors would cut an HNSW graph into islands."""
    if not batch:
        return
    with transaction.atomic():
        Passage.objects.bulk_create(batch)
    fresh = []
    for p in batch:
        digest = _hash(p.text)
        if digest not in seen:
            seen.add(digest)
            fresh.append(p)
    space = _embed_rows("passage", [(p.pk, p.owner_id, p.text) for p in fresh], replace=False)  # new ids
    if space is not None:
        Passage.objects.filter(pk__in=[p.pk for p in batch]).update(space=space)


def _discard_passages(document: Document) -> None:
    ids = list(Passage.objects.filter(document=document).values_list("pk", flat=True))
    vectors.delete("passage", ids)
    Passage.objects.filter(pk__in=ids).delete()


def delete_document(document: Document) -> None:
    _discard_passages(document)
    file_path(document).unlink(missing_ok=True)
    document.delete()


# --- facts ----------------------------------------------------------------------------------
def fact_text(fact: MemoryFact) -> str:
    return f"{fact.category}: {fact.key} = {fact.value}"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def embed_facts(facts: list[MemoryFact]) -> int:
    """Embed the facts whose vector is missing, stale or of another model; how many were."""
    known = {fv.fact_id: fv for fv in FactVector.objects.filter(fact__in=facts).select_related("space")}
    todo = []
    for fact in facts:
        text, have = fact_text(fact), known.get(fact.pk)
        if have is None or have.text_hash != _hash(text) or have.space is None or have.space.model != connections.embedding_model():
            todo.append(fact)
    space = _embed_rows("fact", [(f.pk, f.owner_id, fact_text(f)) for f in todo])
    if space is None:
        return 0
    for fact in todo:
        FactVector.objects.update_or_create(
            fact_id=fact.pk, defaults={"owner_id": fact.owner_id, "space": space, "text_hash": _hash(fact_text(fact))})
    return len(todo)


def on_fact_saved(sender, instance: MemoryFact, **kwargs) -> None:
    """post_save of MemoryFact: its vector is made once the save is committed."""
    fact_id = instance.pk
    if getattr(settings, "KNOWLEDGE_EMBED_FACTS", True) and embeddings.usable():
        transaction.on_commit(lambda: worker.submit(f"fact:{fact_id}", lambda: _embed_fact(fact_id)))


def _embed_fact(fact_id: int) -> None:
    fact = MemoryFact.objects.filter(pk=fact_id).first()
    if fact is not None:
        embed_facts([fact])


def on_fact_deleted(sender, instance: MemoryFact, **kwargs) -> None:
    vectors.delete("fact", [instance.pk])


# --- re-embedding ---------------------------------------------------------------------------
def missing_counts() -> tuple[int, int]:
    """(passages, facts) without a vector of the current model."""
    model = connections.embedding_model()
    passages = Passage.objects.exclude(space__model=model).count()
    fact_ids = FactVector.objects.filter(space__model=model).values("fact_id")
    facts = MemoryFact.objects.exclude(pk__in=fact_ids).count()
    return passages, facts


def backfill(progress: Callable[[int, int], None] | None = None, *, everything: bool = False) -> tuple[int, int]:
    """Embed every passage and fact that has no vector of the current model (all of them with
    `everything`); then drop spaces nothing refers to. Returns (embedded, total)."""
    model = connections.embedding_model()
    passages = Passage.objects.all() if everything else Passage.objects.exclude(space__model=model)
    if everything:
        FactVector.objects.all().delete()
    fact_ids = FactVector.objects.filter(space__model=model).values("fact_id")
    facts = MemoryFact.objects.exclude(pk__in=fact_ids)
    total, done = passages.count() + facts.count(), 0
    if progress:
        progress(0, total)
    for batch in _in_batches(passages, WRITE_BATCH * 4):
        space = _embed_rows("passage", [(p.pk, p.owner_id, p.text) for p in batch])
        if space is None:
            return done, total  # the server or the model is missing: later
        Passage.objects.filter(pk__in=[p.pk for p in batch]).update(space=space)
        done += len(batch)
        if progress:
            progress(done, total)
    for batch in _in_batches(facts, WRITE_BATCH * 4):
        embedded = embed_facts(batch)
        if embedded == 0 and not embeddings.usable():
            return done, total
        done += len(batch)
        if progress:
            progress(done, total)
    _drop_unused_spaces()
    return done, total


def _in_batches(rows, size: int) -> Iterator[list]:
    """`rows` in primary-key order, `size` at a time, each batch read once the one before is handled."""
    last = 0
    while batch := list(rows.filter(pk__gt=last).order_by("pk")[:size]):
        last = batch[-1].pk
        yield batch


def _drop_unused_spaces() -> None:
    for space in VectorSpace.objects.exclude(model=connections.embedding_model()):
        if not Passage.objects.filter(space=space).exists() and not FactVector.objects.filter(space=space).exists():
            vectors.drop_space(space)


_last_check = {"at": 0.0}
CHECK_EVERY_S = 60.0


def queue_backfill_if_needed(force: bool = False) -> None:
    """Re-embed in the background what has no vector of the current model (checked at most
    once a minute per process: a search asks this)."""
    now = time.monotonic()
    if not force and now - _last_check["at"] < CHECK_EVERY_S:
        return
    _last_check["at"] = now
    if not embeddings.usable() or vectors.available() != "ok":
        return
    if any(missing_counts()):
        worker.submit("backfill", backfill)


RESUME_AFTER_S = 60  # a document whose progress has not moved for this long was left by a stopped server


def resume_after_restart(sender=None, recheck: bool = True, **kwargs) -> None:
    """server_started receiver: documents left `indexing` by a stopped server are indexed
    again if their upload is still there, else marked failed; missing vectors are made (also
    for a space whose table is gone: a database restored from a JSON backup has no vectors)."""
    if vectors.available() == "ok":
        existing = set(connection.introspection.table_names())
        for space in VectorSpace.objects.all():
            if any(vectors.table(space, kind) not in existing for kind in vectors.KINDS):
                Passage.objects.filter(space=space).update(space=None)
                FactVector.objects.filter(space=space).delete()
                vectors.space_for(space.model, space.dim)
    # The rest on the worker's thread, in order with the jobs it queues: one writer at a time
    # (a reader beside the worker's write is refused "table is locked" by an in-memory database).
    worker.submit("resume", _resume_and_backfill)
    if recheck:
        # A document whose progress moved within the last minute may be another worker's,
        # alive: look again once it would have moved since.
        timer = threading.Timer(RESUME_AFTER_S + 5, lambda: worker.submit("resume", _resume_stale))
        timer.daemon = True
        timer.start()


def _resume_and_backfill() -> None:
    _resume_stale()
    queue_backfill_if_needed(force=True)


def _resume_stale() -> None:
    stale = timezone.now() - timedelta(seconds=RESUME_AFTER_S)
    for document in Document.objects.filter(status="indexing", updated_at__lt=stale):
        if file_path(document).is_file():
            queue_document(document.pk)
        else:
            Document.objects.filter(pk=document.pk).update(status="failed", error=STOPPED, updated_at=timezone.now())


