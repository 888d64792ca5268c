"""Documents cut by an older splitter (`Document.splitter` below extract.SPLITTER_VERSION) are
split again by a job (tasks.resplit_document), never in the web process: the kept upload is
parsed anew while the old passages stay searchable, then they are swapped for the new ones,
which the document's indexing jobs write and embed as for an upload. A document whose upload is
no longer kept keeps its passages; one the new parser cannot read keeps them too (and is not
tried again)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from . import extract, indexer
from .models import Document

log = logging.getLogger(__name__)
BATCH = 20  # documents queued for a re-split at a time (each is one job, taken in turn with uploads)


def wanted(limit: int = BATCH) -> list[Document]:
    """Ready documents cut by an older splitter whose upload is still kept, oldest first."""
    found = []
    for document in Document.objects.filter(status="ready", splitter__lt=extract.SPLITTER_VERSION).order_by(
            "created_at").only("id", "owner_id", "created_at").iterator():
        if indexer.file_path(document).is_file():
            found.append(document)
        if len(found) >= limit:
            break
    return found


def resplit_slice(document_id: str, job_id: str) -> str:
    """Parse the document again; "split" when its new passages are to be written next (by its
    indexing job, `job_id` handed on), "more" when the worker stopped first, else how it ended:
    skipped, cancelled, superseded, kept (the new parse failed: the old passages stay)."""
    document = Document.objects.filter(pk=document_id).first()
    if document is None:
        return "cancelled"
    if document.status != "ready" or document.splitter >= extract.SPLITTER_VERSION:
        return "skipped"
    if not indexer.file_path(document).is_file():
        return "skipped"
    if not Document.objects.filter(pk=document.pk, status="ready", splitter__lt=extract.SPLITTER_VERSION).update(
            job_id=job_id):
        return "superseded"
    try:
        total = indexer.parse_in_child(document, job_id)
    except indexer.Interrupted:
        return "more"
    except indexer.Cancelled:
        return "cancelled"
    except extract.ExtractError as exc:
        log.warning("document %s could not be split again (its passages stay as they were): %s", document_id, exc)
        Document.objects.filter(pk=document.pk, job_id=job_id).update(splitter=extract.SPLITTER_VERSION)
        indexer.remove_files(document, keep_upload=True)
        return "kept"
    with transaction.atomic():
        if not Document.objects.filter(pk=document.pk, job_id=job_id, status="ready").update(
                status="indexing", spooled=total, spool_offset=0, chunks=0, progress=indexer.PARSE_SHARE,
                splitter=extract.SPLITTER_VERSION, error="", updated_at=timezone.now()):
            return "cancelled"
        indexer.discard_passages(document.pk)
    return "split"
