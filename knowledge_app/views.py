"""The knowledge REST API (DESIGN §10) and the Knowledge page.

POST /knowledge takes one file (multipart field `file`) and answers at once; the document is
indexed by a job worker (`status` "queued" with `queue_position`, then "indexing" with
`progress` in percent, then "ready" or "failed" with `error`). This process only streams the
upload to a file, hashes it and enqueues: it never reads the document. Every lookup is by
owner: another user's document id is a 404, exactly like a missing one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.files.uploadhandler import StopUpload, TemporaryFileUploadHandler
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from jobs_app import queue
from jobs_app.health import jobs_health
from navi_project.http import ApiError, json_view
from sessions_app.auth import api_login_required
from sessions_app.files import sanitize_filename

from . import embeddings, extract, indexer, search, status, tasks, vectors
from .models import Document, Passage
from .tools import describe

MB = 1024 * 1024
SNIFF = 8192


def _max_bytes() -> int:
    return settings.KNOWLEDGE_MAX_FILE_MB * MB


def document_json(d: Document) -> dict:
    found = {"id": str(d.id), "name": d.name, "status": d.status, "chunks": d.chunks, "error": d.error or None,
             "created_at": d.created_at.isoformat(), "progress": d.progress, "kind": d.kind, "size": d.size}
    if d.status == "queued":
        # 1 = the next job a worker takes; None while its job is being enqueued (just uploaded).
        found["queue_position"] = queue.position(d.job_id) if d.job_id else None
    return found


def _owned(request: HttpRequest, document_id: str) -> Document:
    try:
        found = Document.objects.filter(pk=uuid.UUID(str(document_id)), owner=request.user).first()
    except ValueError:  # not a UUID: no such document
        found = None
    if found is None:
        raise ApiError(f"no document '{str(document_id)[:64]}'; GET /knowledge lists yours", 404)
    return found


class _Limited(TemporaryFileUploadHandler):
    """Streams to a temp file, hashing as it goes, and stops past the size cap."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit, self.received, self.too_large = limit, 0, False
        self.sha256 = hashlib.sha256()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.too_large = True
            raise StopUpload(connection_reset=True)
        self.sha256.update(raw_data)
        return super().receive_data_chunk(raw_data, start)


def _too_large() -> ApiError:
    return ApiError(f"the file is larger than KNOWLEDGE_MAX_FILE_MB ({settings.KNOWLEDGE_MAX_FILE_MB} MB); "
                    "split it into smaller files", 400)


@csrf_exempt  # the upload handler must be set before CSRF reads the body; checked just below
@api_login_required
@json_view("GET", "POST")
def documents(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        rows = list(Document.objects.filter(owner=request.user))
        note = _embedding_note()
        if any(d.status in ("queued", "indexing") for d in rows):
            note["jobs"] = jobs_health()["status"]  # "ok", or why nothing moves (no job worker running)
        return JsonResponse({"documents": [document_json(d) for d in rows], **note})
    length = request.META.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > _max_bytes() + 64 * 1024:
        raise _too_large()  # refused before a byte of the body is read
    if request.content_type != "multipart/form-data":
        raise ApiError('send multipart/form-data with the file in a field named "file"', 400)
    handler = _Limited(request, _max_bytes())
    request.upload_handlers = [handler]
    return _receive(request, handler)


def _embedding_note() -> dict:
    """What search can do now, from the start (no document needed): `search` "hybrid" only while
    embeddings can be made, `notice` what to do otherwise (which `ollama pull` to run), and the
    embedding server's and (when set) the reranker's state."""
    embedding = status.embedding()
    problem = status.problem(embedding)
    note = {"search": "hybrid" if problem is None else "words", "notice": problem or "", "embedding": embedding}
    if (reranker := status.reranker()) is not None:
        note["rerank"] = reranker
    return note


@csrf_protect
def _receive(request: HttpRequest, handler: _Limited) -> JsonResponse:
    upload = request.FILES.get("file")
    if handler.too_large:
        raise _too_large()
    if upload is None:
        raise ApiError('no file received; send it in a multipart field named "file"', 400)
    try:
        name = sanitize_filename(upload.name)
        kind = extract.kind_of(name)
        if kind is None:
            raise ApiError(f"'{name}' is not a kind Navi reads; upload {extract.SUPPORTED}", 400)
        if upload.size == 0:
            raise ApiError(f"'{name}' is empty; upload a file with text in it", 400)
        upload.seek(0)
        head = upload.read(SNIFF)
        if kind in ("text", "markdown", "rst", "html") and _binary(head):
            raise ApiError(f"'{name}' is not text (it has binary bytes); upload {extract.SUPPORTED}", 400)
        if Document.objects.filter(owner=request.user).count() >= settings.KNOWLEDGE_MAX_DOCUMENTS:
            raise ApiError(f"you already have {settings.KNOWLEDGE_MAX_DOCUMENTS} documents; delete some first", 400)
        digest = handler.sha256.hexdigest()
        same = Document.objects.filter(owner=request.user, sha256=digest).first()
        if same is not None and same.status != "failed":
            return JsonResponse(document_json(same), status=200)  # the same file again: not a second copy
        if same is not None:
            tasks.delete_document(same)  # it failed before: try afresh
        document = Document(owner=request.user, name=name[:255], kind=kind, sha256=digest, size=upload.size)
        dest = indexer.file_path(document)
        dest.parent.mkdir(parents=True, exist_ok=True)
        _keep(upload, dest)
        try:
            with transaction.atomic():
                document.save(force_insert=True)
        except IntegrityError:  # the same file uploaded at the same moment
            dest.unlink(missing_ok=True)
            same = Document.objects.get(owner=request.user, sha256=digest)
            return JsonResponse(document_json(same), status=200)
    finally:
        upload.close()
    tasks.queue_document(document)
    return JsonResponse(document_json(document), status=201)


_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13))


def _binary(head: bytes) -> bool:
    """Many control bytes: a binary file renamed (a stray one in text is only cleaned)."""
    controls = len(head) - len(head.translate(None, _CONTROL_BYTES))
    return controls * 10 > len(head)


def _keep(upload, dest: Path) -> None:
    """The upload's temp file moved where indexing reads it (copied if it cannot be linked)."""
    temp = getattr(upload, "temporary_file_path", None)
    if temp is not None:
        try:
            os.link(temp(), dest)
            return
        except OSError:
            pass
    upload.seek(0)
    with open(dest, "xb") as out:
        shutil.copyfileobj(upload, out, MB)


@api_login_required
@json_view("GET", "DELETE")
def document(request: HttpRequest, document_id: str) -> JsonResponse:
    found = _owned(request, document_id)
    if request.method == "DELETE":
        tasks.delete_document(found)
        return JsonResponse({"deleted": str(document_id)})
    return JsonResponse(document_json(found))


@api_login_required
@json_view("GET")
def passages(request: HttpRequest, document_id: str) -> JsonResponse:
    """GET /knowledge/<id>/passages?seq=N: the passages of the caller's document (one with `seq`)."""
    found = _owned(request, document_id)
    rows = found.passages.order_by("seq")
    seq = request.GET.get("seq")
    if seq is not None:
        if not seq.isdigit():
            raise ApiError("seq must be a whole number", 400)
        rows = rows.filter(seq=int(seq))
    rows = rows[:200]
    return JsonResponse({"document_id": str(found.id), "name": found.name,
                         "passages": [{"seq": p.seq, "text": p.text, "location": p.location} for p in rows]})


@api_login_required
@json_view("GET")
def passage(request: HttpRequest, passage_id: str) -> JsonResponse:
    """GET /knowledge/passages/<id>: one passage of the caller's, with its document's name and
    where it is (what an answer's source chip opens); another user's id is a 404 like a missing one."""
    found = None
    if passage_id.isdigit() and int(passage_id) < 2**63:  # a bigger number is no row (and no SQLite integer)
        found = Passage.objects.filter(pk=int(passage_id), owner=request.user).select_related("document").first()
    if found is None:
        raise ApiError(f"no passage '{passage_id[:32]}': its document may have been deleted or indexed again; "
                       "search the Knowledge page for it", 404)
    document = found.document
    return JsonResponse({"id": found.pk, "document_id": str(document.id), "name": document.name, "seq": found.seq,
                         "location": found.location, "where": describe(found.location), "text": found.text,
                         "document_status": document.status})


@api_login_required
@json_view("GET")
def knowledge_search(request: HttpRequest) -> JsonResponse:
    query = (request.GET.get("q") or "").strip()
    if not query:
        raise ApiError("add what to look for: /knowledge/search?q=TEXT&k=N", 400)
    if len(query) > 2000:
        raise ApiError("the query is longer than 2000 characters; shorten it", 400)
    raw_k = request.GET.get("k") or "5"
    if not raw_k.isdigit() or not 1 <= int(raw_k) <= search.MAX_K:
        raise ApiError(f"k must be a whole number from 1 to {search.MAX_K}", 400)
    hits = search.search(request.user.pk, query, int(raw_k))
    return JsonResponse({"results": [h.as_dict() for h in hits]})


@login_required
def knowledge_page(request: HttpRequest) -> HttpResponse:
    return render(request, "knowledge.html", {"pull_hint": embeddings.pull_hint(), "vectors": vectors.available()})
