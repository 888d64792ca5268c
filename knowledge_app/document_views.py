"""A document opened (issue #53): its passages, the one a source chip names scrolled to and
marked, and the original file to download. Kept apart from views.py (the REST API), which the
indexing engine's changes touch."""

from __future__ import annotations

import mimetypes
import uuid

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from . import indexer
from .models import Document
from .tools import describe

MAX_SHOWN = 2000  # passages on one page (a document may have up to KNOWLEDGE_MAX_PASSAGES)
TYPES = {"text": "Plain text", "markdown": "Markdown", "rst": "reStructuredText", "html": "HTML", "pdf": "PDF", "docx": "Word (.docx)"}


def _mine(request: HttpRequest, document_id: str) -> Document:
    """The caller's document; another user's id is a 404 exactly like a missing one."""
    try:
        found = Document.objects.filter(pk=uuid.UUID(str(document_id)), owner=request.user).first()
    except ValueError:
        found = None
    if found is None:
        raise Http404("no such document")
    return found


def size_text(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} bytes"


@login_required
def document_page(request: HttpRequest, document_id: str) -> HttpResponse:
    """GET /knowledge/<id>/view[#passage-<passage id>]: the document's passages in order."""
    document = _mine(request, document_id)
    rows = list(document.passages.order_by("seq")[: MAX_SHOWN + 1])
    passages = [{"id": p.pk, "seq": p.seq, "text": p.text, "where": describe(p.location)} for p in rows[:MAX_SHOWN]]
    return render(request, "knowledge_document.html", {
        "document": document, "passages": passages, "more": len(rows) > MAX_SHOWN, "max_shown": MAX_SHOWN,
        "type": TYPES.get(document.kind, document.kind), "size": size_text(document.size),
        "has_file": indexer.file_path(document).exists(),
    })


@login_required
def document_file(request: HttpRequest, document_id: str) -> FileResponse:
    """GET /knowledge/<id>/file: the file as it was uploaded, as a download (never shown inline:
    an uploaded HTML file must not run as a page of Navi's)."""
    document = _mine(request, document_id)
    path = indexer.file_path(document)
    if not path.exists():
        raise Http404("the original file is no longer kept")
    kind = mimetypes.guess_type(document.name)[0] or "application/octet-stream"
    if kind.startswith("text/"):
        kind = "application/octet-stream"  # a download, whatever the browser would make of it
    return FileResponse(open(path, "rb"), as_attachment=True, filename=document.name, content_type=kind)
