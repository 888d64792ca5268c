"""PDF: a page at a time (pypdf), each page's paragraphs under that page: a passage never holds
two pages' text, so `page` in its location is where all of it is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from ..chunker import Block
from .common import ExtractError, Progress, clean

_PARAGRAPH = re.compile(r"\n\s*\n|\n(?=[A-Z0-9•\-])")


def pdf_blocks(path: Path, progress: Progress) -> Iterator[Block]:
    from pypdf import PdfReader  # noqa: PLC0415 - a heavy import only a PDF needs
    from pypdf.errors import PdfReadError, PyPdfError  # noqa: PLC0415

    try:
        with open(path, "rb") as f:
            reader = PdfReader(f)
            if reader.is_encrypted:
                raise ExtractError("the PDF is encrypted; save an unprotected copy and upload that")
            count = len(reader.pages)
            for number in range(count):
                page = reader.pages[number]
                text = page.extract_text() or ""
                # Resolved objects of earlier pages are not needed again: keep memory per page.
                getattr(reader, "resolved_objects", {}).clear()
                for paragraph in _PARAGRAPH.split(text):
                    if paragraph := clean(paragraph):
                        yield Block(paragraph, {"page": number + 1})
                progress((number + 1) / max(1, count))
    except ExtractError:
        raise
    except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, OSError, RecursionError, AssertionError) as exc:
        raise ExtractError(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:200]}); "
                           "open it in a PDF viewer and save it again, then upload the copy") from exc
