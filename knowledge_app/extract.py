"""Documents to passages: each format read as a stream of blocks under their headings
(`formats/`), then cut into passages that follow the sections (`chunker`), each keeping where it
came from: `line` (text formats) or `page` (PDF), and `section`, the heading path.

Bounded memory whatever the file: text is read in blocks (a 100 MB line is never one string,
blank lines cost nothing), HTML and a DOCX's XML are parsed by lxml's event target without a
tree (libxml2 is linear on an unclosed tag; a million empty elements or runs cost time only), a
DOCX's inflated size is capped (a zip bomb stops at the cap), a PDF is read a page at a time.
This module needs no Django: it runs in the parser child (`parse_child`), under its limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from . import chunker
from .chunker import Block
from .formats import docx, html, pdf, rst, text  # stdlib only at import: lxml and pypdf come when a file needs them
from .formats.common import ExtractError, Progress, clean  # noqa: F401 - the names callers use

SPLITTER_VERSION = 2  # passages cut by this code; a document cut by an older one is split again
DOCX_XML_MAX = 256 * 1024 * 1024  # inflated bytes of word/document.xml read at most (the child sets it)
KINDS = {
    ".txt": "text", ".text": "text", ".log": "text", ".csv": "text",
    ".rst": "rst", ".rest": "rst",
    ".md": "markdown", ".markdown": "markdown",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
SUPPORTED = "text (.txt), Markdown (.md), reStructuredText (.rst), HTML (.html), PDF (.pdf) or Word (.docx)"


def kind_of(name: str) -> str | None:
    return KINDS.get(Path(name).suffix.lower())


def pieces(path: Path, kind: str, progress: Progress) -> Iterator[Block]:
    """The document's blocks, as its format lays them out (a .txt written in reST is read as reST)."""
    if kind == "text" and rst.looks_like_rst(path):
        kind = "rst"
    if kind == "text":
        return text.plain_blocks(path, progress)
    if kind == "markdown":
        return text.markdown_blocks(path, progress)
    if kind == "rst":
        return rst.rst_blocks(path, progress)
    if kind == "html":
        return html.html_blocks(path, progress)
    if kind == "pdf":
        return pdf.pdf_blocks(path, progress)
    if kind == "docx":
        return docx.docx_blocks(path, progress, DOCX_XML_MAX)
    raise ExtractError(f"cannot read {kind} files; upload {SUPPORTED}")


def passages(blocks: Iterator[Block]) -> Iterator[tuple[str, dict]]:
    """The passages of a document's blocks: (text, location)."""
    return chunker.passages(blocks)
