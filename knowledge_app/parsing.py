"""Reading an upload into passages in a child process under the KNOWLEDGE_PARSE_* limits
(`parse_child`), to a spool file beside it: what a document's first slice does, and a re-split."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from jobs_app import child, runtime

from . import extract
from .models import Document

log = logging.getLogger(__name__)
PARSE_SHARE = 40  # percent of the progress bar that reading the file takes; writing takes the rest
PROGRESS_EVERY_S = 0.5
CHECK_EVERY_S = 0.25  # while the parser runs: has the document been deleted, is the worker stopping?
STOPPED = "the upload is gone (the server stopped before it was indexed); upload it again"
NO_TEXT = "no text found in it (a scanned PDF needs OCR first; an empty file has none)"


class Cancelled(Exception):
    """The document was deleted (or its job superseded) while this slice ran."""


class Interrupted(Exception):
    """The worker is stopping: the job goes on in its next slice (another worker, or after the restart)."""


def file_path(document: Document) -> Path:
    return Path(settings.KNOWLEDGE_DIR) / str(document.owner_id) / str(document.id)


def spool_path(document: Document) -> Path:
    return file_path(document).with_name(f"{document.id}.passages")


def _still_mine(document: Document, job_id: str) -> bool:
    return Document.objects.filter(pk=document.pk, job_id=job_id).exists()


def parse_in_child(document: Document, job_id: str) -> int:
    """Read the upload into passages in a child process with the KNOWLEDGE_PARSE_* limits, to
    the spool; how many. The child is killed within CHECK_EVERY_S of the document's deletion
    (or its job's change) or the worker's stop."""
    path, spool = file_path(document), spool_path(document)
    if not path.is_file():
        raise extract.ExtractError(STOPPED)
    spool.unlink(missing_ok=True)
    limits = child.Limits(settings.KNOWLEDGE_PARSE_MEMORY_MB, settings.KNOWLEDGE_PARSE_CPU_S,
                          settings.KNOWLEDGE_PARSE_TIMEOUT_S)
    state = {"checked": 0.0, "saved": 0.0}

    def check() -> str | None:
        if runtime.should_stop():
            return "stopping"
        now = time.monotonic()
        if now - state["checked"] < CHECK_EVERY_S:
            return None
        state["checked"] = now
        return None if _still_mine(document, job_id) else "cancelled"

    def progress(fraction: float) -> None:
        now = time.monotonic()
        if now - state["saved"] >= PROGRESS_EVERY_S:
            state["saved"] = now
            Document.objects.filter(pk=document.pk, job_id=job_id).update(
                progress=min(PARSE_SHARE, int(fraction * PARSE_SHARE)), updated_at=timezone.now())

    argv = [sys.executable, "-m", "knowledge_app.parse_child", str(path), document.kind, str(spool),
            str(settings.KNOWLEDGE_MAX_PASSAGES), str(settings.KNOWLEDGE_DOCX_XML_MAX_MB)]
    try:
        outcome = child.run(argv, limits, check=check, on_progress=progress, cwd=str(settings.BASE_DIR))
    except child.Cancelled as exc:
        spool.with_name(spool.name + ".part").unlink(missing_ok=True)
        raise (Interrupted if str(exc) == "stopping" else Cancelled)() from None
    return _parsed(outcome, limits)


def _parsed(outcome: child.Outcome, limits: child.Limits) -> int:
    """The passage count of a parse that succeeded, else ExtractError saying what to do."""
    split = "split the document into smaller files"
    if outcome.status == "ok" and outcome.lines and outcome.lines[-1].startswith("done "):
        total = int(outcome.lines[-1].split()[1])
        if total == 0:
            raise extract.ExtractError(NO_TEXT)
        return total
    if outcome.status == "error":
        raise extract.ExtractError(json.loads(outcome.lines[-1][len("error "):]))
    if outcome.status == "memory":
        raise extract.ExtractError(f"reading it needs more than {limits.memory_mb} MiB of memory "
                                   f"(KNOWLEDGE_PARSE_MEMORY_MB); {split}, or raise that limit")
    if outcome.status in ("cpu", "killed"):
        raise extract.ExtractError(f"reading it took more than {limits.cpu_s} s of CPU time (KNOWLEDGE_PARSE_CPU_S) "
                                   f"or more memory than allowed (KNOWLEDGE_PARSE_MEMORY_MB); {split}, or raise the limit")
    if outcome.status == "timeout":
        raise extract.ExtractError(f"reading it took longer than {limits.wall_s:.0f} s (KNOWLEDGE_PARSE_TIMEOUT_S); "
                                   f"{split}, or raise that limit")
    log.warning("the document parser exited with %s: %s", outcome.returncode, outcome.stderr[-2000:])
    raise extract.ExtractError(f"the document parser stopped unexpectedly (exit code {outcome.returncode}); "
                               "save the document again (or as PDF) and upload the copy")


