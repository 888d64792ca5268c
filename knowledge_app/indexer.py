"""Indexing a document, a slice at a time, and embedding passages and facts (the work the
knowledge jobs of `tasks.py` do; nothing here enqueues).

A document is parsed first, in a child process under limits (`parse_to_spool`): its passages
go to a spool file beside the upload. Then they are written (and embedded) from the spool in
slices of about JOBS_SLICE_S, each batch in one transaction that also moves the document's
offset, so a slice that dies is simply done again from the last batch that committed. A
document is `ready` once its last passage is written; search only reads passages of ready
documents, so a half-indexed one is never seen. If reading it fails it ends `failed` with the
reason and none of its passages are kept.

Passages are embedded as they are written; without an embedding model they are kept for search
by words and embedded later (`backfill`), which is also how a change of EMBEDDING_MODEL
re-embeds everything: the new model gets a space of its own, the old one is dropped once nothing
refers to it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Callable, Iterator

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from jobs_app import runtime
from memory_app.models import MemoryFact
from navi_project import connections

from . import chunker, embeddings, extract, vectors, words
from .models import Document, FactVector, Passage, VectorSpace
from .parsing import (  # noqa: F401 - the names the jobs and views use from here
    CHECK_EVERY_S,
    NO_TEXT,
    PARSE_SHARE,
    STOPPED,
    Cancelled,
    Interrupted,
    file_path,
    parse_in_child,
    spool_path,
)

log = logging.getLogger(__name__)
WRITE_BATCH = 64  # passages written (and embedded) together, in one transaction



def remove_files(document: Document, *, keep_upload: bool = False) -> None:
    """The parse's spool files, and the upload itself unless it is kept (a ready document's page
    offers it as a download; it goes with the document)."""
    spool = spool_path(document)
    for path in ([] if keep_upload else [file_path(document)]) + [spool, spool.with_name(spool.name + ".part")]:
        path.unlink(missing_ok=True)


# --- one slice of a document's job ------------------------------------------------------------
def index_slice(document_id: str, job_id: str) -> str:
    """Parse (if not parsed yet) and write passages for about JOBS_SLICE_S. Returns "more" when
    the next slice must go on, else how it ended: ready, failed, cancelled, superseded, skipped."""
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return "cancelled"
    if document.status in ("ready", "failed"):
        return "skipped"  # done already (a job run twice)
    claimed = Document.objects.filter(pk=document.pk, job_id__in=["", job_id]).update(
        job_id=job_id, status="indexing", updated_at=timezone.now())
    if not claimed:
        return "superseded"
    document.refresh_from_db()
    try:
        if document.spooled is None:
            parse_to_spool(document, job_id)
            document.refresh_from_db()
        return write_slice(document, job_id)
    except Interrupted:
        return "more"
    except Cancelled:
        return "cancelled"
    except extract.ExtractError as exc:
        fail(document, job_id, str(exc))
        return "failed"
    except Exception as exc:  # noqa: BLE001 - any failure ends this document, never the worker
        log.exception("indexing %s failed", document_id)
        fail(document, job_id, f"{type(exc).__name__}: {exc}")
        return "failed"


def parse_to_spool(document: Document, job_id: str) -> int:
    """Read the upload into passages (`parse_in_child`) and have the document write them next."""
    total = parse_in_child(document, job_id)
    if not Document.objects.filter(pk=document.pk, job_id=job_id).update(
            spooled=total, spool_offset=0, chunks=0, progress=PARSE_SHARE, splitter=extract.SPLITTER_VERSION,
            updated_at=timezone.now()):
        raise Cancelled()
    return total


def write_slice(document: Document, job_id: str) -> str:
    """Write passages from the spool, a batch per transaction, for about JOBS_SLICE_S; "more"
    if some are left, "ready" when the last one is written."""
    deadline = time.monotonic() + settings.JOBS_SLICE_S
    spool = spool_path(document)
    if not spool.is_file():
        raise extract.ExtractError(STOPPED)
    written, offset, total = document.chunks, document.spool_offset, max(1, document.spooled or 1)
    with open(spool, "rb") as f:
        f.seek(offset)
        while True:
            if runtime.should_stop():
                return "more"
            lines = [line for line in (f.readline() for _ in range(WRITE_BATCH)) if line]
            if not lines:
                return finish(document, job_id, written)
            rows = [json.loads(line) for line in lines]
            offset += sum(len(line) for line in lines)
            batch = [Passage(document=document, owner_id=document.owner_id, seq=written + i, text=text, location=loc,
                             section=str(loc.get("section") or "")) for i, (text, loc, _) in enumerate(rows)]
            fresh = [p for p, (_, _, repeated) in zip(batch, rows) if not repeated]
            found = _embed([embedding_text(document.name, p) for p in fresh])  # outside the transaction: a slow server holds no lock
            progress = PARSE_SHARE + int((100 - PARSE_SHARE - 1) * (written + len(batch)) / total)
            with transaction.atomic():
                # The document's row first: a delete waits for this batch (or this batch finds it gone).
                if not Document.objects.filter(pk=document.pk, job_id=job_id, chunks=written).update(
                        chunks=written + len(batch), spool_offset=offset, progress=min(99, progress),
                        updated_at=timezone.now()):
                    raise Cancelled()
                if found is not None:
                    space = found[0]
                    for passage in batch:  # repeats get no vector of their own: they are "embedded" as the first
                        passage.space = space
                Passage.objects.bulk_create(batch)
                if found is not None:
                    vectors.write(found[0], "passage", [(p.pk, p.owner_id, v) for p, v in zip(fresh, found[1])])
            written += len(batch)
            if time.monotonic() > deadline:  # at least a batch a slice: every slice moves on
                return "more"


def finish(document: Document, job_id: str, count: int) -> str:
    if count == 0:
        raise extract.ExtractError(NO_TEXT)
    if not Document.objects.filter(pk=document.pk, job_id=job_id).update(
            status="ready", error="", chunks=count, progress=100, updated_at=timezone.now()):
        raise Cancelled()
    remove_files(document, keep_upload=True)  # the passages are what is searched; the upload is offered as a download
    words.added(count)
    return "ready"


def fail(document: Document, job_id: str, reason: str) -> None:
    """The document ends `failed` with `reason`; none of its passages are kept."""
    with transaction.atomic():
        if Document.objects.filter(pk=document.pk, job_id__in=["", job_id]).update(
                status="failed", error=reason[:2000], chunks=0, progress=0, updated_at=timezone.now()):
            discard_passages(document.pk)
    remove_files(document)


def discard_passages(document_id) -> None:
    ids = list(Passage.objects.filter(document_id=document_id).values_list("pk", flat=True))
    vectors.delete("passage", ids)
    Passage.objects.filter(pk__in=ids).delete()


def embedding_text(name: str, passage: Passage) -> str:
    """A passage as its vector is made: the document's title and section path, then the text."""
    return chunker.embedding_text(name, passage.location or {}, passage.text)


def _embed(texts: list[str]) -> tuple[VectorSpace, list[list[float]]] | None:
    """The current model's space and one vector per text; None if embedding is not possible now."""
    if not texts or not embeddings.usable() or vectors.available() != "ok":
        return None
    try:
        found = embeddings.embed(texts)
    except embeddings.EmbeddingError as exc:
        log.info("embedding skipped: %s", exc)
        return None
    return vectors.space_for(connections.embedding_model(), len(found[0])), found


def _embed_rows(kind: str, rows: list[tuple[int, int, str]], *, replace: bool = True) -> VectorSpace | None:
    """Embed (id, owner_id, text) rows into the current model's space; None if not possible."""
    found = _embed([text for _, _, text in rows])
    if found is None:
        return None
    space, made = found
    # A fact is embedded again when edited, and a re-run of backfill may meet a passage twice.
    vectors.write(space, kind, [(i, owner, v) for (i, owner, _), v in zip(rows, made)], replace=replace)
    return space


def index_document_now(document_id) -> str:
    """Every slice of a document's indexing, here and now (benchmarks; the job does it in slices)."""
    job_id = f"now-{document_id}"
    Document.objects.filter(pk=document_id).update(job_id=job_id)
    while (outcome := index_slice(str(document_id), job_id)) == "more":
        pass
    return outcome


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


def embed_fact(fact_id: int) -> str:
    fact = MemoryFact.objects.filter(pk=fact_id).first()
    if fact is None:
        return "cancelled"  # deleted meanwhile
    embed_facts([fact])
    return "ok"


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


def forget_all_vectors() -> None:
    """Everything counts as not embedded (`knowledge_embed --all`): the next backfill re-embeds it."""
    Passage.objects.update(space=None)
    FactVector.objects.all().delete()


def backfill(progress: Callable[[int, int], None] | None = None, *, everything: bool = False,
             deadline: float | None = None) -> tuple[int, int]:
    """Embed every passage and fact that has no vector of the current model (all of them with
    `everything`); then drop spaces nothing refers to. Stops early at the monotonic `deadline`
    or when the worker is stopping. Returns (embedded, total): less than total when it stopped
    early, or when the server or the model is missing."""
    if everything:
        forget_all_vectors()
    model = connections.embedding_model()
    passages = Passage.objects.exclude(space__model=model)
    fact_ids = FactVector.objects.filter(space__model=model).values("fact_id")
    facts = MemoryFact.objects.exclude(pk__in=fact_ids)
    total, done = passages.count() + facts.count(), 0
    if progress:
        progress(0, total)

    def out_of_time() -> bool:
        return runtime.should_stop() or (deadline is not None and time.monotonic() > deadline)

    for batch in _in_batches(passages.select_related("document"), WRITE_BATCH * 4):
        space = _embed_rows("passage", [(p.pk, p.owner_id, embedding_text(p.document.name, p)) for p in batch])
        if space is None:
            return done, total  # the server or the model is missing: later
        Passage.objects.filter(pk__in=[p.pk for p in batch]).update(space=space)
        done += len(batch)
        if progress:
            progress(done, total)
        if out_of_time():
            return done, total
    for batch in _in_batches(facts, WRITE_BATCH * 4):
        embedded = embed_facts(batch)
        if embedded == 0 and not embeddings.usable():
            return done, total
        done += len(batch)
        if progress:
            progress(done, total)
        if out_of_time():
            return done, total
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


def backfill_wanted() -> bool:
    """Can embedding happen now, and is something without a vector of the current model?"""
    return embeddings.usable() and vectors.available() == "ok" and any(missing_counts())


_last_check = {"at": 0.0}
BACKFILL_CHECK_EVERY_S = 60.0
backfill_queuers: list[Callable[[], None]] = []  # tasks.py adds its enqueuer (this module never imports tasks)


def queue_backfill_if_needed(force: bool = False) -> None:
    """Have what lacks a vector of the current model re-embedded by a job (checked at most once
    a minute per process: a search asks this)."""
    now = time.monotonic()
    if not force and now - _last_check["at"] < BACKFILL_CHECK_EVERY_S:
        return
    _last_check["at"] = now
    if backfill_wanted():
        for enqueue in backfill_queuers:
            enqueue()


def remake_lost_vector_tables() -> None:
    """A space whose vector tables are gone (a database restored from a backup made before
    backups carried vectors) has its tables made again and its rows marked not embedded."""
    if vectors.available() != "ok":
        return
    existing = set(connection.introspection.table_names())
    for space in VectorSpace.objects.all():
        if any(vectors.table(space, kind) not in existing for kind in vectors.KINDS):
            Passage.objects.filter(space=space).update(space=None)
            FactVector.objects.filter(space=space).delete()
            vectors.space_for(space.model, space.dim)
