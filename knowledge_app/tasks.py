"""Knowledge's background jobs (Django's Tasks API; run by `manage.py db_worker`, never by the
web server): a document's indexing in slices, a fact's vector, re-embedding; and what enqueues,
cancels and watches over them. Every job is safe to run twice and checks as it goes whether
its document still wants it."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_tasks import task

from jobs_app import queue

from . import embeddings, indexer, resplit
from .models import Document

log = logging.getLogger(__name__)
SWEEP_GRACE_S = 10  # a document this fresh may still be getting its first job (enqueued on commit)


@task(takes_context=True)
def index_document(context, document_id: str, owner_id: int) -> str:
    """One slice of a document's indexing (about JOBS_SLICE_S); the next slice is a new job at
    the back of the queue, so another account's document gets its turn in between."""
    job_id = str(context.task_result.id)
    outcome = indexer.index_slice(document_id, job_id)
    if outcome != "more":
        return outcome
    with transaction.atomic():
        following = queue.enqueue(index_document, document_id=document_id, owner_id=owner_id)
        if not Document.objects.filter(pk=document_id, job_id=job_id).update(job_id=following.id):
            transaction.set_rollback(True)  # deleted meanwhile: no next slice
            return "cancelled"
    return "continued"


@task(takes_context=True)
def resplit_document(context, document_id: str, owner_id: int) -> str:
    """A document cut by an older splitter parsed again (resplit.py); its new passages are then
    written by index_document jobs, as an upload's."""
    job_id = str(context.task_result.id)
    outcome = resplit.resplit_slice(document_id, job_id)
    if outcome == "more":
        queue.enqueue(resplit_document, document_id=document_id, owner_id=owner_id)
        return "continued"
    if outcome != "split":
        return outcome
    with transaction.atomic():
        following = queue.enqueue(index_document, document_id=document_id, owner_id=owner_id)
        if not Document.objects.filter(pk=document_id, job_id=job_id).update(job_id=following.id):
            transaction.set_rollback(True)  # deleted meanwhile
            return "cancelled"
    return "continued"


def queue_resplits() -> int:
    """Documents cut by an older splitter get a job each (a batch at a time); how many."""
    found = resplit.wanted()
    for document in found:
        queue.enqueue_once(resplit_document, document_id=str(document.pk), owner_id=document.owner_id)
    return len(found)


@task()
def embed_fact(fact_id: int, owner_id: int) -> str:
    return indexer.embed_fact(fact_id)


@task()
def backfill_embeddings(everything: bool = False) -> str:
    """Embed what has no vector of the current model, for a few slices' time; then the next job."""
    done, total = indexer.backfill(everything=everything, deadline=time.monotonic() + settings.JOBS_SLICE_S * 5)
    if done < total and embeddings.usable():
        queue.enqueue(backfill_embeddings)
        return "continued"
    return "ok" if done == total else "postponed"


# --- enqueueing and cancelling ----------------------------------------------------------------
def queue_document(document: Document) -> None:
    """Index it once the upload's transaction commits; its job's id is kept on it."""
    document_id = str(document.pk)

    def remember(result) -> None:
        if Document.objects.filter(pk=document_id, job_id="").update(job_id=result.id):
            document.job_id = str(result.id)  # the caller's answer shows the queue position

    queue.enqueue_on_commit(index_document, then=remember, document_id=document_id, owner_id=document.owner_id)


def delete_document(document: Document) -> None:
    """Delete it; its job stops (see `on_document_deleting`)."""
    document.delete()


def on_document_deleting(sender, instance: Document, **kwargs) -> None:
    """pre_delete of a Document (also when its owner is deleted): its row locked first, so a
    slice writing a batch commits before this or finds the document gone after; its passages
    and vectors removed, its waiting job dropped, its files removed after the commit. A running
    parse child is killed by its job within indexer.CHECK_EVERY_S."""
    Document.objects.filter(pk=instance.pk).update(job_id="deleted")  # the UPDATE takes the row lock
    indexer.discard_passages(instance.pk)
    queue.cancel_waiting(index_document, document_id=str(instance.pk))
    queue.cancel_waiting(resplit_document, document_id=str(instance.pk))
    transaction.on_commit(lambda: indexer.remove_files(instance))


def on_gave_up(kwargs: dict, reason: str) -> None:
    """The job's worker died JOBS_MAX_ATTEMPTS times while indexing it."""
    document = Document.objects.filter(pk=kwargs.get("document_id")).first()
    if document is not None and document.status in ("queued", "indexing"):
        indexer.fail(document, document.job_id,
                     f"indexing it stopped the worker every time ({reason}); split it into smaller files, "
                     "or save it again (or as PDF) and upload the copy")


def on_fact_saved(sender, instance, **kwargs) -> None:
    """post_save of MemoryFact: its vector is made by a job once the save is committed."""
    if getattr(settings, "KNOWLEDGE_EMBED_FACTS", True) and embeddings.usable():
        queue.enqueue_once(embed_fact, fact_id=instance.pk, owner_id=instance.owner_id)


def queue_backfill() -> None:
    queue.enqueue_once(backfill_embeddings, everything=False)


# --- the worker's periodic checks --------------------------------------------------------------
def sweep_documents() -> int:
    """Documents left queued or indexing without a live job (a crash between a slice and the
    next, a database restored mid-indexing) get one again, or fail when their upload is gone;
    how many were looked after."""
    before = timezone.now() - timedelta(seconds=SWEEP_GRACE_S)
    waiting = list(Document.objects.filter(status__in=["queued", "indexing"], updated_at__lt=before))
    if not waiting:
        return 0
    live = queue.live_ids(index_document)  # one query, however many documents wait
    fixed = 0
    for document in waiting:
        if document.job_id in live:
            continue
        job = queue.job(document.job_id)
        if job is not None and job.status == queue.FAILED:
            indexer.fail(document, document.job_id, f"indexing it failed ({job.exception_class_path.rpartition('.')[2]}); "
                         "upload it again, and if it fails again, save it again (or as PDF) first")
        elif indexer.file_path(document).is_file() or indexer.spool_path(document).is_file():
            with transaction.atomic():
                result = queue.enqueue(index_document, document_id=str(document.pk), owner_id=document.owner_id)
                Document.objects.filter(pk=document.pk, job_id=document.job_id).update(
                    job_id=result.id, updated_at=timezone.now())
            log.info("document %s had no live job: queued again", document.pk)
        else:
            indexer.fail(document, document.job_id, indexer.STOPPED)
        fixed += 1
    return fixed
